"""The committed world-2/4 fixtures run on real gloo ranks (one process per rank, loopback).

Each rank imports the fixture JSON, feeds it its own shards of a seeded model, and runs it with
real collectives. With the same tokens on every rank the loss equals eager PyTorch's, and each
gradient shard equals the matching rows of fsdp_size x the eager gradient (reduce-scatter sums
identical per-rank gradients). This checks the traced graphs themselves, padding and TP included,
not just their shapes.

The file doubles as the rank worker: `python test_multirank.py --worker ...`.
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

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TRACED_DIR = REPO / "tests" / "data" / "traced"

# Every world-2 fixture, plus the world-4 ones that add something (2 x 2 mesh, 4-way padding),
# and every fixture of the other model families (jointfx.models). The real model libraries'
# fixtures (jointfx.models.real) run through the same worker from test_real_models.py (slow).
CASES = ["fsdp_w2", "sac_w2", "bf16_w2", "padding_w2", "fsdp_tp_w4", "padding_w4",
         "gpt2_w2", "encoder_w2", "convbn_w2", "moe_w2", "uneven_w4", "uneven_bf16_w4"]
TIMEOUT_S = 180


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """Runs every case: one group of worker processes per world size (torch imports once)."""
    results: dict[str, list[dict]] = {}
    for world in sorted({_world(c) for c in CASES}):
        names = [c for c in CASES if _world(c) == world]
        out_dir = tmp_path_factory.mktemp(f"world{world}")
        per_rank = _launch(world, names, out_dir)
        for name in names:
            results[name] = [r[name] for r in per_rank]
    return results


def _world(name: str) -> int:
    return int(name.rsplit("_w", 1)[1])


def _launch(world: int, names: list[str], out_dir: Path) -> list[dict]:
    import torch.distributed as dist

    # The parent hosts the rendezvous store, so no port has to be guessed.
    store = dist.TCPStore("127.0.0.1", 0, world + 1, True, timeout=timedelta(seconds=TIMEOUT_S),
                          wait_for_workers=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    fixtures = [str(TRACED_DIR / f"{n}.json") for n in names]
    procs = [subprocess.Popen(
        [sys.executable, "-X", "faulthandler", __file__, "--worker", "--rank", str(rank),
         "--world", str(world), "--port", str(store.port),
         "--out", str(out_dir / f"rank{rank}.json"), *fixtures],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for rank in range(world)]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT_S)
            logs.append(out)
    finally:
        for p in procs:  # a failed rank must not leave the others hanging
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, p in enumerate(procs):
        assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{logs[rank][-4000:]}"
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize("name", CASES)
def test_fixture_runs_on_gloo_ranks(name: str, rank_results: dict[str, list[dict]]) -> None:
    results = rank_results[name]
    assert len(results) == _world(name)
    losses = {r["loss"] for r in results}
    assert len(losses) == 1, f"ranks disagree on the loss: {losses}"
    for r in results:
        assert r["loss_err"] <= r["tol"], r
        assert r["max_grad_err"] <= r["tol"], r


# ----------------------------------------------------------------------------- worker


def _worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(REPO / "python"))
    import torch.distributed as dist

    from jointfx.groups import use_one_gloo_worker_thread

    timeout = timedelta(seconds=TIMEOUT_S)
    store = dist.TCPStore("127.0.0.1", args.port, args.world + 1, False, timeout=timeout)
    use_one_gloo_worker_thread()
    dist.init_process_group("gloo", store=store, rank=args.rank, world_size=args.world,
                            timeout=timeout)
    results = {Path(f).stem: _run_fixture(Path(f), args.rank, args.world) for f in args.fixtures}
    Path(args.out).write_text(json.dumps(results))
    dist.destroy_process_group()


def _run_model_fixture(fixture: Path, rank: int, world: int) -> dict:
    """A jointfx.models fixture: the case's seeded model and batch, the same on every rank."""
    import torch

    from jointfx.export import import_graph, load_graph
    from jointfx.models import BATCH_SEED, CASES as MODEL_CASES, WEIGHT_SEED, eager_loss
    from jointfx.trace import param_layouts, setup_groups, shard_param

    doc = load_graph(fixture)
    case = MODEL_CASES[fixture.stem.rsplit("_w", 1)[0]]
    groups = setup_groups(0)
    assert [pg["name"] for pg in doc["process_groups"]] == [groups.fsdp.name]
    model = case.build(WEIGHT_SEED)
    inputs, targets = case.batch(BATCH_SEED)
    layouts = param_layouts(model, world, 1)
    params = dict(model.named_parameters())
    shards = [shard_param(params[lay.fqn].detach(), lay, fsdp_rank=rank, fsdp_size=world,
                          tp_rank=0, tp_size=1) for lay in layouts]
    buffers = [b.detach().clone() for _, b in model.named_buffers()]
    torch.manual_seed(1234)  # dropout: every rank and eager draw the same masks
    with torch.no_grad():
        outputs = import_graph(doc)(*shards, *buffers, *inputs, *targets)
    torch.manual_seed(1234)
    loss, _ = eager_loss(case, model, inputs, targets)
    # Gradients of the trainable parameters only: a frozen one has no output (and no
    # reduce-scatter), as its requires_grad=False says.
    trained = [lay for lay in layouts if lay.trainable]
    grads = torch.autograd.grad(loss, [params[lay.fqn] for lay in trained])
    assert len(outputs) == 1 + len(trained)
    max_err = 0.0
    for lay, got, want in zip(trained, outputs[1:], grads):
        expected = shard_param(want * world, lay, fsdp_rank=rank, fsdp_size=world, tp_rank=0,
                               tp_size=1)
        assert got.shape == expected.shape and got.dtype == expected.dtype, lay.fqn
        scale = max(expected.abs().max().item(), 1e-3)
        max_err = max(max_err, (got - expected).abs().max().item() / scale)
    bf16 = case.trace_kwargs.get("param_dtype") is torch.bfloat16
    return {"rank": rank, "loss": outputs[0].item(), "loss_err": abs(outputs[0].item() - loss.item()),
            "max_grad_err": max_err, "tol": 5e-2 if bf16 else 1e-5}


def _run_real_fixture(fixture: Path, rank: int, world: int) -> dict:
    """A jointfx.models.real fixture (a real model library's model): the case's seeded model and
    batch, the same on every rank; eager is the library model's own step."""
    import torch

    from jointfx.export import grad_mode, import_graph, load_graph
    from jointfx.models.real import (
        BATCH_SEED,
        REAL_CASES,
        WEIGHT_SEED,
        eager_loss,
        flat_user_inputs,
    )
    from jointfx.trace import param_layouts, setup_groups, shard_param

    doc = load_graph(fixture)
    case = REAL_CASES[fixture.stem.rsplit("_w", 1)[0]]
    groups = setup_groups(0)
    assert [pg["name"] for pg in doc["process_groups"]] == [groups.fsdp.name]
    model = case.build(WEIGHT_SEED)
    batch = case.batch(BATCH_SEED)
    layouts = param_layouts(model, world, 1)
    params = dict(model.named_parameters())
    shards = [shard_param(params[lay.fqn].detach(), lay, fsdp_rank=rank, fsdp_size=world,
                          tp_rank=0, tp_size=1) for lay in layouts]
    buffers = [b.detach().clone() for _, b in model.named_buffers()]
    gm = import_graph(doc)
    with grad_mode(gm), torch.no_grad():
        outputs = gm(*shards, *buffers, *flat_user_inputs(batch))
    loss = eager_loss(case, model, batch)
    # Gradients of the trainable parameters only: a frozen one has no output (and no
    # reduce-scatter), as its requires_grad=False says.
    trained = [lay for lay in layouts if lay.trainable]
    grads = torch.autograd.grad(loss, [params[lay.fqn] for lay in trained])
    assert len(outputs) == 1 + len(trained)
    max_err = 0.0
    for lay, got, want in zip(trained, outputs[1:], grads):
        expected = shard_param(want * world, lay, fsdp_rank=rank, fsdp_size=world, tp_rank=0,
                               tp_size=1)
        assert got.shape == expected.shape and got.dtype == expected.dtype, lay.fqn
        scale = max(expected.abs().max().item(), 1e-3)
        max_err = max(max_err, (got - expected).abs().max().item() / scale)
    return {"rank": rank, "loss": outputs[0].item(), "loss_err": abs(outputs[0].item() - loss.item()),
            "max_grad_err": max_err, "tol": 1e-5}


def _run_fixture(fixture: Path, rank: int, world: int) -> dict:
    from dataclasses import replace

    from jointfx.trace import VARIANTS

    if fixture.name.startswith(("hf_", "timm_")):
        return _run_real_fixture(fixture, rank, world)
    if fixture.stem.rsplit("_w", 1)[0] not in VARIANTS:
        return _run_model_fixture(fixture, rank, world)

    import torch

    from jointfx.export import import_graph, load_graph
    from jointfx.model import cross_entropy_loss
    from jointfx.trace import (
        build_model,
        make_real_inputs,
        param_layouts,
        setup_groups,
        shard_param,
        variant_config,
    )

    doc = load_graph(fixture)
    cfg = variant_config(fixture.stem.rsplit("_w", 1)[0], world)
    groups = setup_groups(cfg.tp_size)  # registers "fsdp"/"tp" for the 2-D mesh
    names = [pg["name"] for pg in doc["process_groups"]]
    assert names == [groups.fsdp.name] + ([groups.tp.name] if groups.tp else []), names

    tp = max(cfg.tp_size, 1)
    fsdp_size = groups.fsdp.size
    layouts = param_layouts(build_model(cfg), fsdp_size, tp)
    inputs = make_real_inputs(cfg, layouts, fsdp_size=fsdp_size, rank=rank)
    with torch.no_grad():
        outputs = import_graph(doc)(*inputs)

    full = build_model(replace(cfg, model=replace(cfg.model, tp_size=1)))
    loss = cross_entropy_loss(full(inputs[-2]), inputs[-1])
    grads = torch.autograd.grad(loss, list(full.parameters()))
    tp_rank, fsdp_rank = rank % tp, rank // tp
    max_err = 0.0
    for lay, got, want in zip(layouts, outputs[1:], grads):
        expected = shard_param(want * fsdp_size, lay, fsdp_rank=fsdp_rank, fsdp_size=fsdp_size,
                               tp_rank=tp_rank, tp_size=tp)
        assert got.shape == expected.shape and got.dtype == expected.dtype, lay.fqn
        # Relative to the gradient's scale: sums over ranks reorder float additions.
        scale = max(expected.abs().max().item(), 1e-3)
        max_err = max(max_err, (got - expected).abs().max().item() / scale)
    return {"rank": rank, "loss": outputs[0].item(), "loss_err": abs(outputs[0].item() - loss.item()),
            "max_grad_err": max_err, "tol": 5e-2 if cfg.param_dtype is torch.bfloat16 else 1e-5}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("fixtures", nargs="+")
    _worker(parser.parse_args())


if __name__ == "__main__":
    main()
