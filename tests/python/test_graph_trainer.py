"""jointfx as one pass of torchtitan 0.3.0's GraphTrainer, end to end on CPU.

Each of two gloo ranks (one process each, loopback) traces GraphTrainer's training step of a
2-layer llama3 debugmodel under SimpleFSDP with the fake process group (jointfx.titan), applies
GraphTrainer's own pass list (DCE, canonicalize, dedup of unshard chains, its per-block
bucketing+reordering pass) with and without a jointfx pass in it, then switches to a real gloo
group and runs each graph for 3 SGD steps from the same parameters. Loss and every gradient
shard must be bitwise equal between the two, step by step, on every rank; the jointfx graph must
really differ (re-gathers in backward). The Inductor case ends both lists with GraphTrainer's
full_inductor_compilation_pass and compares within GraphTrainer's own tolerance. The qwen3 and
deepseek_v3 cases put the default jointfx pipeline, which deduplicates, buckets and schedules
itself, in place of GraphTrainer's dedup and bucketing passes (GraphTrainer's dedup drops the
bfloat16 cast of a deepseek_v3 expert weight gathered twice, and the graph then fails to run).

The file doubles as the rank worker: `python test_graph_trainer.py --worker ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import titan_fixture_paths

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORLD = 2
STEPS = 3
TIMEOUT_S = 600
PIPELINE = "tag-fsdp{reshard=always},remat"
DEFAULT_PIPELINE = str(REPO / "configs" / "pipelines" / "default.json")


def _have_torchtitan() -> bool:
    try:
        import torchtitan.experiments.graph_trainer.trainer  # noqa: F401
    except ImportError:
        return False
    return True


def _launch(tmp: Path, mode: str, *extra: str) -> list[dict]:
    if not _have_torchtitan():
        if os.environ.get("CI") == "true":
            pytest.fail("torchtitan is not installed: run scripts/setup")
        pytest.skip("torchtitan is not installed: run scripts/setup")
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, WORLD + 1, True, timeout=timedelta(seconds=TIMEOUT_S),
                          wait_for_workers=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(REPO / "build" / "python"),
                                          os.environ.get("PYTHONPATH", "")])}
    # -X faulthandler: a rank that dies of a signal prints its Python stack into its log.
    procs = [subprocess.Popen(
        [sys.executable, "-X", "faulthandler", __file__, "--worker", "--rank", str(r),
         "--port", str(store.port),
         "--mode", mode, "--out", str(tmp / f"rank{r}.json"), *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(WORLD)]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT_S)
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} exited {p.returncode}:\n{logs[r][-6000:]}"
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(WORLD)]


def test_graph_trainer_pass_list_bitwise(tmp_path: Path) -> None:
    results = _launch(tmp_path, "eager")
    for r, res in enumerate(results):
        assert res["jointfx_findings"] == [], res["jointfx_findings"]
        # The jointfx graph re-gathers resharded weights in backward: more all-gathers.
        assert res["all_gathers_with"] > res["all_gathers_without"], res
        assert len(res["losses"]) == STEPS
        assert len(set(res["losses"])) == STEPS, f"rank {r}: steps did not change the loss"
        assert res["mismatches"] == [], f"rank {r}: {res['mismatches']}"
    assert results[0]["losses"] == results[1]["losses"]  # one loss, reduced over both ranks


@pytest.mark.parametrize("model", ["qwen3", "deepseek_v3"])
def test_graph_trainer_default_pipeline_bitwise(tmp_path: Path, model: str) -> None:
    """The default jointfx pipeline in place of GraphTrainer's dedup and bucketing passes, on
    model families other than llama3: qwen3 (per-head q/k RMSNorm, the embedding tied to the
    output projection) and deepseek_v3 (a dense and an MoE layer, grouped experts)."""
    results = _launch(tmp_path, "eager", "--model", model, "--pipeline", DEFAULT_PIPELINE,
                      "--no-gt-dedup", "--no-gt-bucketing")
    for r, res in enumerate(results):
        assert res["jointfx_findings"] == [], res["jointfx_findings"]
        # Every FSDP pass of the pipeline found something to do on this model: a pass that
        # leaves an unfamiliar model as it was is the failure this guards against.
        for name in ("tag-fsdp", "remat", "dedup-fsdp-unshard", "bucket", "split-comm-groups",
                     "schedule"):
            assert res["jointfx_changed"].get(name), (name, res["jointfx_changed"])
        assert len(set(res["losses"])) == STEPS, f"rank {r}: steps did not change the loss"
        assert res["mismatches"] == [], f"rank {r}: {res['mismatches']}"
    assert results[0]["losses"] == results[1]["losses"]


@pytest.mark.slow
def test_graph_trainer_inductor(tmp_path: Path) -> None:
    """Marked slow: Inductor's C++ codegen for the whole step takes minutes on a small CPU."""
    results = _launch(tmp_path, "inductor")
    for r, res in enumerate(results):
        assert res["mismatches"] == [], f"rank {r}: {res['mismatches']}"


_HSDP_SCRIPT = """
import json, sys
from jointfx import dumps_graph, export_graph, specs_from_traced, titan
titan.init_fake_world(4, 0)
tr = titan.trace_model("llama3", 2, replicas=2)
open(sys.argv[1], "w").write(dumps_graph(tr.export()))
bare = export_graph(tr.gm, **specs_from_traced(tr.traced, tr.model))
print(json.dumps(bare["meta"]))
"""


def test_hsdp_graph_runs_on_each_ranks_own_groups(jfx_bin: Path, tmp_path: Path) -> None:
    """SimpleFSDP's hybrid_shard on a (2, 2) mesh at world 4: the groups are named as rank 0
    sees them (shard group [0, 1], replicate group [0, 2]), so each rank needs the mesh to find
    its own. export_graph writes it from the graph's DeviceMesh placeholders (before, the meta
    had none and ranks 2 and 3 found no group); each gradient's replicate all-reduce, which
    SimpleFSDP issues before the reduce-scatter, belongs to its gradient chain; the default
    pipeline keeps loss and gradients bitwise on 4 gloo ranks. Without the mesh, exec says why
    a rank has no group."""
    if not _have_torchtitan():
        if os.environ.get("CI") == "true":
            pytest.fail("torchtitan is not installed: run scripts/setup")
        pytest.skip("torchtitan is not installed: run scripts/setup")
    path = tmp_path / "hsdp.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "python"), str(REPO / "build" / "python"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", _HSDP_SCRIPT, str(path)], env=env,
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr[-4000:]
    mesh = {"dim_names": ["dp_replicate", "dp_shard"], "shape": [2, 2]}
    assert json.loads(r.stdout.strip().splitlines()[-1])["mesh"] == mesh
    doc = json.loads(path.read_text())
    assert doc["meta"]["mesh"] == mesh
    assert sorted(g["ranks"] for g in doc["process_groups"]) == [[0, 1], [0, 2]]

    r = subprocess.run([str(jfx_bin), "analyze", "--json", str(path)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    fsdp = json.loads(r.stdout)["fsdp"]
    grads = sum(1 for o in doc["outputs"] if o["kind"] == "gradient")
    assert fsdp["gradient_chains"] == fsdp["hsdp_all_reduces"] == grads
    assert fsdp["other_collectives"] == []

    r = subprocess.run([str(jfx_bin), "parity", str(path), "-p", DEFAULT_PIPELINE, "--nproc", "4",
                        "--steps", "2"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "bitwise identical (4 ranks, 2 steps" in r.stdout, r.stdout

    del doc["meta"]["mesh"]
    no_mesh = tmp_path / "no_mesh.json"
    no_mesh.write_text(json.dumps(doc))
    r = subprocess.run([str(jfx_bin), "exec", str(no_mesh), "--nproc", "4", "--timeout-s", "60"],
                       capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode != 0
    assert ("is not registered on this rank: the graph header lists it with ranks [0, 1], as the "
            "rank that traced the graph saw it, and no device mesh in the graph meta gives this "
            "rank its own copy of it") in r.stderr, r.stderr


@pytest.mark.parametrize("path", titan_fixture_paths(), ids=lambda p: p.stem)
def test_titan_fixture_structure(jfx_bin: Path, path: Path) -> None:
    """The committed graph_trainer trace (scripts/gen_fixtures.py, TITAN_FIXTURES) as the
    analyses see it: one block per layer holding all of that layer's parameters (q/k norms
    included), an unshard chain for every gather and a gradient chain for every gradient, no
    collective left unrecognized; and every FSDP pass of the default pipeline changes it. Its
    bitwise parity under the pipelines is ctest's parity.<name>."""
    doc = json.loads(path.read_text())
    n_layers = doc["meta"]["model"]["layers"]
    grads = [o for o in doc["outputs"] if o["kind"] == "gradient"]
    r = subprocess.run([str(jfx_bin), "analyze", "--json", str(path)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    a = json.loads(r.stdout)
    blocks = a["blocks"]
    assert [b["name"] for b in blocks["blocks"]] == [f"layers.{i}" for i in range(n_layers)]
    layer_params = {i: sum(1 for x in doc["inputs"] if x.get("kind") == "parameter"
                           and x["fqn"].startswith(f"layers.{i}.")) for i in range(n_layers)}
    assert [b["parameters"] for b in blocks["blocks"]] == list(layer_params.values())
    fsdp = a["fsdp"]
    assert fsdp["other_collectives"] == []
    assert fsdp["gradient_chains"] == len(grads)
    assert fsdp["unshard_chains"]["forward"] == fsdp["all_gathers_by_phase"]["forward"]
    r = subprocess.run([str(jfx_bin), "opt", str(path), "-p", DEFAULT_PIPELINE, "--stats",
                        "-o", os.devnull, "--format", "text"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    stats = dict(line.split(" = ") for line in r.stderr.splitlines() if " = " in line)
    assert int(stats["tag-fsdp.chains-resharded"]) > 0, stats
    assert int(stats["tag-fsdp.non-fsdp-collectives"]) == 0, stats
    assert int(stats["dedup-fsdp-unshard.chains-merged"]) > 0, stats
    assert int(stats["bucket.buckets.all_gather"]) > 0, stats
    assert int(stats["schedule.moved-nodes"]) > 0, stats


# ----------------------------------------------------------------------------- rank worker


def _worker(a: argparse.Namespace) -> None:
    import warnings
    from functools import partial

    import torch
    import torch.distributed as dist
    from torchtitan.experiments.graph_trainer import passes as gt
    from torchtitan.experiments.graph_trainer.fsdp_passes import (
        get_fsdp_param_module_order,
        joint_transformer_block_bucketing_reordering_pass,
    )

    from jointfx import graph_trainer, titan
    from jointfx.groups import register_process_groups, use_one_gloo_worker_thread
    from jointfx.trace import register_group_name

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    def pass_list(tr: titan.TitanTrace, with_jointfx: bool) -> list:
        bucketing = partial(joint_transformer_block_bucketing_reordering_pass,
                            module_bucket_plans=tr.bucket_plans(),
                            fsdp_param_module_order=get_fsdp_param_module_order(
                                tr.traced.state_fqns))
        passes = [gt.eliminate_dead_code_pass, gt.canonicalize_graph_pass]
        if a.gt_dedup:
            passes.append(gt.deduplicate_fsdp_unshard_chains_pass)
        if with_jointfx:
            passes.append(graph_trainer.jointfx_pass(a.pipeline, traced=tr.traced,
                                                     model=tr.model, strict=True))
        if a.gt_bucketing:
            passes.append(bucketing)
        if a.mode == "inductor":
            from torchtitan.experiments.graph_trainer.inductor_passes import (
                full_inductor_compilation_pass,
            )

            passes.append(full_inductor_compilation_pass)
        return passes

    # Trace (fake group): once per variant, since GraphTrainer's passes edit the graph in place.
    titan.init_fake_world(WORLD, a.rank)
    runs = {}
    for with_jointfx in (False, True):
        tr = titan.trace_model(a.model, 2)
        gm = gt.apply_graph_passes(tr.gm, tr.traced.example_inputs, pass_list(tr, with_jointfx))
        runs[with_jointfx] = (tr, gm)
    report = getattr(runs[True][1], "meta", {}).get("jointfx_report", {})

    def gathers(gm: torch.fx.GraphModule) -> int:
        return sum(1 for n in gm.graph.nodes if "all_gather_into_tensor" in str(n.target))

    counts = (gathers(runs[False][1]), gathers(runs[True][1])) if a.mode == "eager" else (0, 1)

    # Run (gloo): the graphs name the group "0"; register the real one under that name.
    dist.destroy_process_group()
    timeout = timedelta(seconds=TIMEOUT_S)
    store = dist.TCPStore("127.0.0.1", a.port, WORLD + 1, False, timeout=timeout)
    use_one_gloo_worker_thread()
    dist.init_process_group("gloo", store=store, rank=a.rank, world_size=WORLD, timeout=timeout)
    register_group_name("0", dist.group.WORLD)
    # Groups the pipeline added (split-comm-groups' "0_rs"), created here as the executor would.
    register_process_groups(runs[True][1])
    outs: dict[bool, list[list[torch.Tensor]]] = {}
    for with_jointfx, (tr, gm) in runs.items():
        titan.set_local_shards(tr.model, tr.full_params, a.rank, WORLD)
        steps = []
        for _ in range(STEPS):
            res = titan.run_step(tr, gm)
            steps.append([t.detach().clone() for t in res])
            titan.sgd_update(tr.model, res[1:])
        outs[with_jointfx] = steps
    mismatches = []
    fqns = ["loss"] + [k for k, p in runs[True][0].model.named_parameters() if p.requires_grad]
    for step, (x, y) in enumerate(zip(outs[False], outs[True]), 1):
        for name, u, v in zip(fqns, x, y):
            same = (torch.equal(u, v) if a.mode == "eager"
                    else torch.allclose(u, v, rtol=1e-5, atol=1e-5))
            if not same:
                mismatches.append(f"step {step} {name}: max diff {(u - v).abs().max().item()}")
    Path(a.out).write_text(json.dumps({
        "losses": [s[0].item() for s in outs[True]],
        "mismatches": mismatches,
        "all_gathers_without": counts[0], "all_gathers_with": counts[1],
        "jointfx_findings": report.get("findings", []),
        "jointfx_changed": {p["name"]: bool(p.get("changed")) for p in report.get("passes", [])},
    }))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", choices=["eager", "inductor"], default="eager")
    p.add_argument("--out", required=True)
    p.add_argument("--model", choices=["llama3", "qwen3", "deepseek_v3"], default="llama3")
    p.add_argument("--pipeline", default=PIPELINE)
    p.add_argument("--no-gt-dedup", dest="gt_dedup", action="store_false",
                   help="leave GraphTrainer's own dedup of unshard chains out of both pass lists")
    p.add_argument("--no-gt-bucketing", dest="gt_bucketing", action="store_false",
                   help="leave GraphTrainer's own bucketing pass out of both pass lists")
    _worker(p.parse_args())
