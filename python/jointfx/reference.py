"""PyTorch's side of the executor comparisons: a jointfx graph run as a torch.fx GraphModule on
real gloo ranks, with the data `jointfx exec` takes and the gradient files it writes.

    python -m jointfx.reference GRAPH --nproc N --params P.safetensors --batch B.safetensors
                                [--steps S] [--save-grads DIR] [--log PATH] [--threads T]
                                [--seed N]

Every rank imports GRAPH (jointfx.export.import_graph), creates the graph's process groups and
registers them under their names (this rank's members from the graph's mesh, as the executor
works them out; extra groups such as split-comm-groups' included), shards the full parameters of P exactly as the tracer does
(trace.shard_param: TP piece, then zero-padded FSDP rows), takes its slice of the batch B, and
calls the GraphModule S times on the same inputs (no optimizer). --save-grads writes
DIR/grads.step<s>.rank<r>.safetensors with `__loss__`, one tensor per gradient FQN and
`buffer:<fqn>` per buffer the graph updates (after the step), the
layout of `jointfx exec --save-grads`, so the two can be compared byte for byte. --log writes
one JSON line per step and rank with the seconds the GraphModule call took (the executor's
`seconds` measures the same span: inputs ready to outputs returned).

The parent hosts the rendezvous TCPStore on 127.0.0.1 and starts one process per rank; if a rank
fails the others are killed and the exit status is non-zero.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

PYTHON_DIR = Path(__file__).resolve().parent.parent


def run(graph: str | Path, *, nproc: int, params: str | Path, batch: str | Path, steps: int = 1,
        save_grads: str | Path | None = None, log: str | Path | None = None, threads: int = 1,
        timeout_s: int = 300, debug_exit_rank: int | None = None, seed: int = 0) -> None:
    """Runs GRAPH on `nproc` gloo ranks (one process each); raises RuntimeError naming the first
    rank that fails, once the others are killed. `debug_exit_rank` (tests): that rank exits with
    status 3 after joining the group, leaving its peers waiting in their first collective."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, nproc + 1, True, timeout=timedelta(seconds=timeout_s),
                          wait_for_workers=False)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PYTHON_DIR),
                                                        os.environ.get("PYTHONPATH")]))}
    common = [str(graph), "--nproc", str(nproc), "--params", str(params), "--batch", str(batch),
              "--steps", str(steps), "--threads", str(threads), "--timeout-s", str(timeout_s),
              "--seed", str(seed)]
    if save_grads:
        common += ["--save-grads", str(save_grads)]
    if log:
        common += ["--log", str(log)]
    if debug_exit_rank is not None:
        common += ["--debug-exit-rank", str(debug_exit_rank)]
    with tempfile.TemporaryDirectory(prefix="jfx-reference-") as out_dir:
        outs = [open(Path(out_dir) / f"rank{r}.log", "w+") for r in range(nproc)]
        procs = [subprocess.Popen([sys.executable, "-m", "jointfx.reference", *common, "--worker",
                                   "--rank", str(r), "--port", str(store.port)],
                                  env=env, stdout=outs[r], stderr=subprocess.STDOUT, text=True)
                 for r in range(nproc)]
        # Each rank's exit lands on a queue the moment it happens, so the first rank to fail is
        # the one reported (its peers fail right after, of "connection closed by peer"), and
        # the others, stuck in a collective with it or spinning in gloo, are killed at once.
        exits: queue.Queue[int] = queue.Queue()
        for rank, p in enumerate(procs):
            threading.Thread(target=lambda r=rank, q=p: (q.wait(), exits.put(r)),
                             daemon=True).start()
        failed = None  # (rank, what happened)
        deadline = time.monotonic() + timeout_s + 60
        try:
            for _ in procs:
                try:
                    rank = exits.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    rank = next(r for r, p in enumerate(procs) if p.poll() is None)
                    failed = (rank, f"did not finish within {timeout_s + 60} s")
                    break
                if procs[rank].returncode != 0:
                    failed = (rank, f"exited with {procs[rank].returncode}")
                    break
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            logs = []
            for f in outs:
                f.seek(0)
                logs.append(f.read())
                f.close()
    if failed is not None:
        rank, what = failed
        others = "".join(f"\n--- rank {r}:\n{log[-2000:]}" for r, log in enumerate(logs)
                         if r != rank)
        raise RuntimeError(f"reference rank {rank} {what}:\n{logs[rank][-4000:]}{others}")


def write_fixture_data(fixture: str | Path, out_dir: str | Path) -> tuple[Path, Path]:
    """Full parameters and buffers (seed 0) and one batch (seed 1) for a traced fixture
    `<variant>_w<N>.json` (a tiny-Llama variant, a jointfx.models case, a real model library's
    model of jointfx.models.real or a jointfx.titan graph_trainer trace), as safetensors:
    (params, batch). The batch is the graph's own shape, so every rank sees the same data."""
    import re

    import torch
    from safetensors.torch import save_file

    from jointfx import trace

    m = re.fullmatch(r"(\w+)_w(\d+)", Path(fixture).stem)
    from jointfx.models import CASES

    if m and m.group(1).startswith("titan_"):
        return _write_titan_fixture_data(Path(fixture), Path(out_dir))
    if m and m.group(1) in CASES:
        return _write_model_fixture_data(m.group(1), Path(out_dir))
    if m and m.group(1).startswith(("hf_", "timm_")):
        return _write_real_fixture_data(m.group(1), Path(out_dir))
    if not m or m.group(1) not in trace.VARIANTS:
        raise ValueError(f"{fixture}: not a traced fixture <variant>_w<N>.json")
    cfg = trace.variant_config(m.group(1), int(m.group(2)))
    full = trace.build_model(replace(cfg, model=replace(cfg.model, tp_size=1)), seed=0)
    state = {k: v.detach().contiguous() for k, v in full.named_parameters()}
    state.update({k: v.detach().contiguous() for k, v in full.named_buffers()})
    gen = torch.Generator().manual_seed(1)
    shape = (cfg.batch_size, cfg.seq_len)
    tokens = torch.randint(0, cfg.model.vocab_size, shape, generator=gen)
    labels = torch.randint(0, cfg.model.vocab_size, shape, generator=gen)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, out / "params.safetensors")
    save_file({"tokens": tokens, "labels": labels}, out / "batch.safetensors")
    return out / "params.safetensors", out / "batch.safetensors"


def _write_titan_fixture_data(fixture: Path, out: Path) -> tuple[Path, Path]:
    """write_fixture_data for a graph_trainer fixture (jointfx.titan, titan_<family>_w<N>): the
    model and step inputs trace_model used, the inputs under the graph's user-input names.
    Needs torchtitan (ImportError without it)."""
    import json

    from safetensors.torch import save_file

    from jointfx import titan

    doc = json.loads(fixture.read_text())
    model = doc["meta"]["model"]
    state, inputs = titan.fixture_data(model["family"], int(model["layers"]),
                                       int(doc["meta"]["world_size"]))
    names = [i["name"] for i in doc["inputs"] if i["kind"] == "user_input"]
    if len(names) != len(inputs):
        raise ValueError(f"{fixture}: {len(names)} user inputs, the titan step has {len(inputs)}")
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, out / "params.safetensors")
    save_file({n: t.contiguous() for n, t in zip(names, inputs)}, out / "batch.safetensors")
    return out / "params.safetensors", out / "batch.safetensors"


def _write_model_fixture_data(case_name: str, out: Path) -> tuple[Path, Path]:
    """write_fixture_data for a jointfx.models fixture: the case's seeded model (parameters and
    buffers by FQN) and seeded batch (by input name)."""
    from safetensors.torch import save_file

    from jointfx.models import BATCH_SEED, CASES, WEIGHT_SEED

    case = CASES[case_name]
    model = case.build(WEIGHT_SEED)
    state = {k: v.detach().contiguous() for k, v in model.named_parameters()}
    state.update({k: v.detach().contiguous() for k, v in model.named_buffers()})
    inputs, targets = case.batch(BATCH_SEED)
    names = case.input_names + case.target_names
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, out / "params.safetensors")
    save_file({n: t.contiguous() for n, t in zip(names, [*inputs, *targets])},
              out / "batch.safetensors")
    return out / "params.safetensors", out / "batch.safetensors"


def _write_real_fixture_data(case_name: str, out: Path) -> tuple[Path, Path]:
    """write_fixture_data for a jointfx.models.real fixture: the library model's seeded weights
    and buffers by FQN, the seeded batch by graph input name (a Hugging Face batch by keyword).
    Needs the library (ImportError without it)."""
    from safetensors.torch import save_file

    from jointfx.models.real import BATCH_SEED, REAL_CASES, WEIGHT_SEED, user_inputs_by_name

    if case_name not in REAL_CASES:
        raise ValueError(f"{case_name}: no such case in jointfx.models.real")
    case = REAL_CASES[case_name]
    model = case.build(WEIGHT_SEED)
    state = {k: v.detach().contiguous() for k, v in model.named_parameters()}
    state.update({k: v.detach().contiguous() for k, v in model.named_buffers()})
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, out / "params.safetensors")
    save_file({n: t.contiguous() for n, t in user_inputs_by_name(case, case.batch(BATCH_SEED))},
              out / "batch.safetensors")
    return out / "params.safetensors", out / "batch.safetensors"


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where this rank sits on the graph's mesh: its TP piece, its FSDP shard, its data rows."""

    tp: int = 1
    tp_rank: int = 0
    shards: int = 1
    shard_rank: int = 0
    dp_rank: int = 0


def _layout(doc: dict[str, Any], rank: int, world: int) -> _Layout:
    """The mesh of the graph meta read as the tracers lay it out: 1-D, every rank one FSDP shard
    (one whole replica for DDP, `dp_replicate`); 2-D (`dp_replicate`, `dp_shard`): HSDP,
    sharded along the second dim; any other 2-D: (fsdp, tp)."""
    mesh = doc.get("meta", {}).get("mesh", {})
    shape = list(mesh.get("shape", [world]))
    names = list(mesh.get("dim_names", []))
    if len(shape) not in (1, 2) or math.prod(shape) != world:
        raise RuntimeError(f"graph mesh {shape} does not fit a world of {world}")
    if len(shape) == 1:
        if names == ["dp_replicate"]:
            return _Layout(dp_rank=rank)
        return _Layout(shards=world, shard_rank=rank, dp_rank=rank)
    if names[:1] == ["dp_replicate"]:
        return _Layout(shards=shape[1], shard_rank=rank % shape[1], dp_rank=rank)
    tp = shape[1]
    return _Layout(tp=tp, tp_rank=rank % tp, shards=shape[0], shard_rank=rank // tp,
                   dp_rank=rank // tp)


def _inputs(doc: dict[str, Any], gm: Any, params: dict[str, Any], batch: dict[str, Any],
            at: _Layout) -> list[Any]:
    from jointfx.trace import ParamLayout, shard_param

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = []
    for spec, node in zip(doc["inputs"], placeholders, strict=True):
        if spec["kind"] in ("mesh", "opaque"):
            # What a DTensor flattens to besides its local tensor (its DeviceMesh): the graph
            # reads none of it, and the executor passes None too.
            values.append(None)
            continue
        shape = tuple(node.meta["val"].shape)
        if spec["kind"] == "parameter":
            full = params[spec["fqn"]]
            layout = ParamLayout(spec["fqn"], tuple(full.shape), shape, shape, full.dtype)
            values.append(shard_param(full, layout, fsdp_rank=at.shard_rank,
                                      fsdp_size=at.shards, tp_rank=at.tp_rank, tp_size=at.tp))
        elif spec["kind"] == "buffer":
            values.append(params[spec["fqn"]].clone())
        else:
            t = batch[spec["name"]]
            if tuple(t.shape) != shape:  # a global batch: this data-parallel rank's rows
                t = t.narrow(0, at.dp_rank * shape[0], shape[0])
            values.append(t.contiguous())
        if tuple(values[-1].shape) != shape:
            raise RuntimeError(f"input {spec['name']}: {tuple(values[-1].shape)} vs graph {shape}")
    return values


def _worker(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file, save_file

    from jointfx.export import buffers_to_mutate, grad_mode, import_graph, load_graph
    from jointfx.groups import register_process_groups, use_one_gloo_worker_thread

    torch.set_num_threads(a.threads)
    timeout = timedelta(seconds=a.timeout_s)
    store = dist.TCPStore("127.0.0.1", a.port, a.nproc + 1, False, timeout=timeout)
    use_one_gloo_worker_thread()  # as `jointfx exec` runs gloo (docs/executor.md, Limits)
    dist.init_process_group("gloo", store=store, rank=a.rank, world_size=a.nproc, timeout=timeout)
    if a.debug_exit_rank == a.rank:
        print(f"rank {a.rank}: --debug-exit-rank", flush=True)
        os._exit(3)
    doc = load_graph(a.graph)
    at = _layout(doc, a.rank, a.nproc)
    # Every header group under its name, this rank's slice of the mesh, as the executor does.
    register_process_groups(doc, replace=True)
    gm = import_graph(doc)
    inputs = _inputs(doc, gm, load_file(a.params), load_file(a.batch), at)
    # Random ops in the graph (dropout) draw from the default generator, seeded as `jointfx
    # exec --seed` seeds it: the same stream on every rank, the same masks as the executor's.
    torch.manual_seed(a.seed)
    out_specs = doc["outputs"]
    loss_index = next(i for i, o in enumerate(out_specs) if o["kind"] == "loss")
    # Buffers the graph updates, as `jointfx exec --save-grads` writes them ("buffer:<fqn>" after
    # each step): in-place writes land in the input tensors, buffer_mutation outputs are copied in.
    buffer_index = {spec["fqn"]: i for i, spec in enumerate(doc["inputs"])
                    if spec["kind"] == "buffer"}
    updated = sorted({f for fqns in buffers_to_mutate(gm).values() for f in fqns})
    log = open(a.log.replace("{rank}", str(a.rank)), "w") if a.log else None
    if a.save_grads:
        Path(a.save_grads).mkdir(parents=True, exist_ok=True)
    for step in range(1, a.steps + 1):
        t0 = time.perf_counter()
        with grad_mode(gm):
            outs = gm(*inputs)
        seconds = time.perf_counter() - t0
        for spec, value in zip(out_specs, outs):
            if spec["kind"] == "buffer_mutation":
                inputs[buffer_index[spec["fqn"]]].copy_(value)
        if a.save_grads:
            tensors = {"__loss__": outs[loss_index].contiguous()}
            for spec, value in zip(out_specs, outs):
                if spec["kind"] == "gradient":
                    tensors[spec["fqn"]] = value.contiguous()
            for fqn in updated:
                tensors[f"buffer:{fqn}"] = inputs[buffer_index[fqn]].contiguous()
            save_file(tensors, f"{a.save_grads}/grads.step{step}.rank{a.rank}.safetensors")
        if log:
            log.write(json.dumps({"step": step, "rank": a.rank, "seconds": seconds,
                                  "loss": outs[loss_index].item()}) + "\n")
    if log:
        log.close()
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("graph")
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--params", required=True, help="full parameters and buffers by FQN")
    p.add_argument("--batch", required=True, help="user inputs by input name")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--save-grads")
    p.add_argument("--log", help="JSONL per step and rank; {rank} in the path is replaced")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--timeout-s", type=int, default=300)
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random ops' generator (as jointfx exec --seed)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--debug-exit-rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        _worker(a)
        return 0
    try:
        run(a.graph, nproc=a.nproc, params=a.params, batch=a.batch, steps=a.steps,
            save_grads=a.save_grads, log=a.log, threads=a.threads, timeout_s=a.timeout_s,
            seed=a.seed)
    except RuntimeError as e:
        print(f"jointfx.reference: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
