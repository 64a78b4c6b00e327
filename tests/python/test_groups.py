"""The default pipeline's output runs in Python on gloo ranks once register_process_groups has
registered the groups the pipeline added (split-comm-groups' "0_rs").

Two gloo ranks each import the traced fixture fsdp_w2, run the default pipeline in process
(run_pipeline with configs/pipelines/default.json), call the result without registering
(it must fail naming the missing group), register, and call it again; loss and gradient shards
must be bitwise equal to the untransformed graph's on the same inputs.

The file doubles as the rank worker: `python test_groups.py --worker ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURE = REPO / "tests" / "data" / "traced" / "fsdp_w2.json"
DEFAULT_PIPELINE = REPO / "configs" / "pipelines" / "default.json"
WORLD = 2
TIMEOUT_S = 300


def test_default_pipeline_output_runs_on_gloo_ranks(tmp_path: Path) -> None:
    import torch.distributed as dist

    from jointfx.reference import write_fixture_data

    params, batch = write_fixture_data(FIXTURE, tmp_path)
    store = dist.TCPStore("127.0.0.1", 0, WORLD + 1, True, timeout=timedelta(seconds=TIMEOUT_S),
                          wait_for_workers=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(REPO / "build" / "python"),
                                          os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen(
        [sys.executable, "-X", "faulthandler", __file__, "--worker", "--rank", str(r),
         "--port", str(store.port), "--params", str(params), "--batch", str(batch),
         "--out", str(tmp_path / f"r{r}.json")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(WORLD)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{logs[r][-6000:]}"
    for r in range(WORLD):
        res = json.loads((tmp_path / f"r{r}.json").read_text())
        assert "0_rs" in res["added_groups"], res
        assert res["registered"] == res["added_groups"], res
        assert "Could not resolve the process group registered under the name 0_rs" in \
            res["unregistered_error"], res["unregistered_error"]
        assert res["rs_on_new_group"] > 0, res
        assert res["mismatches"] == [], res["mismatches"]
        assert res["outputs_compared"] > 1


def _worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    from jointfx import import_graph, load_graph, register_process_groups, run_pipeline
    from jointfx.groups import use_one_gloo_worker_thread
    from jointfx.reference import _inputs, _layout

    torch.set_num_threads(1)
    timeout = timedelta(seconds=TIMEOUT_S)
    store = dist.TCPStore("127.0.0.1", a.port, WORLD + 1, False, timeout=timeout)
    use_one_gloo_worker_thread()
    dist.init_process_group("gloo", store=store, rank=a.rank, world_size=WORLD, timeout=timeout)
    doc = load_graph(FIXTURE)
    gm = import_graph(doc)
    inputs = _inputs(doc, gm, load_file(a.params), load_file(a.batch),
                     _layout(doc, a.rank, WORLD))
    # A second import: run_pipeline may edit the GraphModule it is given in place.
    new = run_pipeline(import_graph(doc), str(DEFAULT_PIPELINE))
    assert new is not gm
    before = {p["name"] for p in doc["process_groups"]}
    added = sorted(p["name"] for p in new.meta["jointfx"]["process_groups"]
                   if p["name"] not in before)
    rs_new = sum(1 for n in new.graph.nodes
                 if "reduce_scatter" in str(n.target) and any(x in added for x in n.args
                                                              if isinstance(x, str)))
    try:
        with torch.no_grad():
            new(*inputs)
        error = ""
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        error = str(e)
    dist.barrier()  # the failed call sent nothing: both ranks failed at their first 0_rs op
    registered = sorted(register_process_groups(new))
    with torch.no_grad():
        want = gm(*inputs)
        got = new(*inputs)
    mismatches = [f"output {i}: max diff {(u - v).abs().max().item()}"
                  for i, (u, v) in enumerate(zip(want, got))
                  if isinstance(u, torch.Tensor) and not torch.equal(u, v)]
    Path(a.out).write_text(json.dumps({
        "added_groups": added, "registered": registered, "unregistered_error": error,
        "rs_on_new_group": rs_new, "mismatches": mismatches, "outputs_compared": len(want)}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    for k in ("--rank", "--port"):
        p.add_argument(k, type=int, required=True)
    for k in ("--params", "--batch", "--out"):
        p.add_argument(k, required=True)
    _worker(p.parse_args())
