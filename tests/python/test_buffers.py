"""Buffer updates: the conv + BatchNorm fixtures (tests/data/buffers/convbn_w1.json from
scripts/gen_buffer_fixtures.py, tests/data/traced/convbn_w2.json from scripts/gen_fixtures.py).

The graphs update BatchNorm's running statistics in place; export/import carry that both ways
(and the functional form, outputs of kind buffer_mutation); `jointfx exec` starts the buffers as
the module does and carries the updates from step to step, exactly as PyTorch eager does.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO
from jointfx.models import CASES, WEIGHT_SEED
from jointfx.export import (
    ExportError,
    InputSpec,
    OutputSpec,
    buffers_to_mutate,
    dumps_graph,
    export_graph,
    import_graph,
    load_graph,
)

WORLDS = (1, 2)
STEPS = 3
LR = 0.1
CASE = CASES["convbn"]
LOCAL_BATCH = 4  # images per rank in the traced graph


def fixture(world: int) -> Path:
    folder = "buffers" if world == 1 else "traced"
    return REPO / "tests" / "data" / folder / f"convbn_w{world}.json"


def bn_buffers() -> list[str]:
    return [fqn for fqn, _ in CASE.build(WEIGHT_SEED).named_buffers()]


def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_buffer_fixtures.py"),
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "convbn_w1.json").read_bytes() == fixture(1).read_bytes()


@pytest.mark.parametrize("world", WORLDS)
def test_import_export_carries_the_inplace_updates(world: int) -> None:
    doc = load_graph(fixture(world))
    gm = import_graph(doc)
    assert dumps_graph(export_graph(gm)) == dumps_graph(doc)
    writes = buffers_to_mutate(gm)
    # Every BatchNorm: native_batch_norm writes running_mean and running_var, add_ the counter.
    assert sorted(f for fqns in writes.values() for f in fqns) == sorted(bn_buffers())
    assert len(writes) == 2 * len(bn_buffers()) // 3
    for name, fqns in writes.items():
        target = next(n.target for n in gm.graph.nodes if n.name == name)
        if target is torch.ops.aten.native_batch_norm.default:
            assert [f.rsplit(".", 1)[1] for f in fqns] == ["running_mean", "running_var"]
        else:
            assert target is torch.ops.aten.add_.Tensor
            assert fqns[0].endswith("num_batches_tracked")
    assert doc["meta"]["buffer_init"] == {
        fqn: "ones" if fqn.endswith("running_var") else "zeros" for fqn in bn_buffers()}


def _functional_gm() -> torch.fx.GraphModule:
    # running_mean' = lerp(running_mean, batch mean, 0.1): the form torch.export records.
    g = torch.fx.Graph()
    rm, x = g.placeholder("rm"), g.placeholder("x")
    mean = g.call_function(torch.ops.aten.mean.dim, (x, [0]))
    upd = g.call_function(torch.ops.aten.lerp.Scalar, (rm, mean, 0.1))
    loss = g.call_function(torch.ops.aten.sum.default, (x,))
    g.output([loss, upd])
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_buffer_mutation_outputs_round_trip() -> None:
    gm = _functional_gm()
    inputs = [InputSpec("buffer", "bn.running_mean"), InputSpec("user_input")]
    outputs = [OutputSpec("loss"), OutputSpec("buffer_mutation", "bn.running_mean")]
    doc = export_graph(gm, inputs=inputs, outputs=outputs)
    assert doc["outputs"][1] == {"fqn": "bn.running_mean", "kind": "buffer_mutation"}
    back = import_graph(doc)
    assert buffers_to_mutate(back) == {"lerp_scalar": ["bn.running_mean"]}
    assert dumps_graph(export_graph(back)) == dumps_graph(doc)
    with pytest.raises(ExportError, match="output 1 .buffer_mutation. names 'bn.nope'"):
        export_graph(gm, inputs=inputs,
                     outputs=[OutputSpec("loss"), OutputSpec("buffer_mutation", "bn.nope")])


def _eager_reference(world: int, images: torch.Tensor, labels: torch.Tensor
                     ) -> list[list[dict[str, torch.Tensor]]]:
    """Buffers of each rank after each step: one model copy per rank (own buffers, same
    parameters), rank r trains on slice r of the batch, gradients summed over ranks (the graph's
    reduce-scatter "sum"), then SGD p -= lr * g, as `jointfx exec --optimizer sgd` does."""
    # Reductions (convolution backward, batch statistics) split work by thread: run with the
    # executor's --threads 1 so both sum in the same order.
    torch.set_num_threads(1)
    models = [CASE.build(WEIGHT_SEED) for _ in range(world)]
    b = LOCAL_BATCH
    out: list[list[dict[str, torch.Tensor]]] = []
    for _ in range(STEPS):
        grads = []
        for r, m in enumerate(models):
            loss = CASE.loss_fn(m(images[r * b:(r + 1) * b]), labels[r * b:(r + 1) * b])
            grads.append(torch.autograd.grad(loss, list(m.parameters())))
        total = [gs[0] + gs[1] if world == 2 else gs[0] for gs in zip(*grads)]
        with torch.no_grad():
            for m in models:
                for p, g in zip(m.parameters(), total):
                    p.add_(g, alpha=-LR)
        out.append([{k: v.clone() for k, v in m.named_buffers()} for m in models])
    return out


@pytest.mark.parametrize("world", WORLDS)
def test_exec_updates_running_stats_exactly_as_eager(world: int, jfx_bin: Path,
                                                     tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    cfg = CASE.config
    model = CASE.build(WEIGHT_SEED)
    state = {k: v.detach().contiguous() for k, v in model.named_parameters()}
    state.update({k: v.detach().contiguous() for k, v in model.named_buffers()})
    save_file(state, tmp_path / "params.safetensors")
    gen = torch.Generator().manual_seed(3)
    n = world * LOCAL_BATCH
    images = torch.randn(n, cfg["in_channels"], cfg["image_size"], cfg["image_size"],
                         generator=gen)
    labels = torch.randint(0, cfg["num_classes"], (n,), generator=gen)
    save_file({"images": images, "labels": labels}, tmp_path / "batch.safetensors")
    r = subprocess.run([str(jfx_bin), "exec", str(fixture(world)), "--nproc", str(world),
                        "--steps", str(STEPS), "--optimizer", "sgd", "--lr", str(LR),
                        "--params", str(tmp_path / "params.safetensors"),
                        "--batch", str(tmp_path / "batch.safetensors"),
                        "--save-grads", str(tmp_path / "out"), "--threads", "1", "--quiet",
                        "--timeout-s", "120"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    ref = _eager_reference(world, images, labels)
    compared = 0
    for step in range(STEPS):
        for rank in range(world):
            got = load_file(tmp_path / "out" / f"grads.step{step + 1}.rank{rank}.safetensors")
            bufs = {k.removeprefix("buffer:"): v for k, v in got.items()
                    if k.startswith("buffer:")}
            want = ref[step][rank]
            assert sorted(bufs) == sorted(want)
            for fqn, value in want.items():
                assert torch.equal(bufs[fqn], value), (step + 1, rank, fqn,
                                                        (bufs[fqn] - value).abs().max())
                compared += 1
    assert compared == STEPS * world * len(bn_buffers())
    # The ranks saw different data, so their running statistics differ (no SyncBatchNorm).
    if world == 2:
        assert not torch.equal(ref[0][0]["stem.bn.running_mean"],
                               ref[0][1]["stem.bn.running_mean"])


def test_exec_starts_buffers_as_the_module_does(jfx_bin: Path, tmp_path: Path) -> None:
    """Without --params the graph meta's buffer_init applies: running_var starts at one, so after
    one step it is 0.9 + 0.1 * (batch variance) >= 0.9, and the counter is at one."""
    from safetensors.torch import load_file

    r = subprocess.run([str(jfx_bin), "exec", str(fixture(1)), "--steps", "2", "--optimizer",
                        "none", "--save-grads", str(tmp_path / "out"), "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    for step in (1, 2):
        got = load_file(tmp_path / "out" / f"grads.step{step}.rank0.safetensors")
        for fqn in bn_buffers():
            if fqn.endswith("num_batches_tracked"):
                assert got[f"buffer:{fqn}"].item() == step
            elif fqn.endswith("running_var"):
                assert bool((got[f"buffer:{fqn}"] >= 0.9 ** step).all())
    first = load_file(tmp_path / "out" / "grads.step1.rank0.safetensors")
    # running_mean = 0.9 * 0 + 0.1 * batch mean: small, and not a randn draw.
    assert first["buffer:stem.bn.running_mean"].abs().max().item() < 1.0


def test_exec_copies_buffer_mutation_outputs_into_the_buffer(jfx_bin: Path,
                                                             tmp_path: Path) -> None:
    """The functional form: an output of kind buffer_mutation becomes the buffer's value for the
    next step (rm <- lerp(rm, mean(x), 0.1), as BatchNorm's running-mean update)."""
    from safetensors.torch import load_file, save_file
    from torch.fx.experimental.proxy_tensor import make_fx

    from jointfx.export import write_graph

    def step(rm: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
        return [x.sum(), torch.lerp(rm, x.mean(0), 0.1)]

    gm = make_fx(step, tracing_mode="fake")(torch.zeros(4), torch.zeros(2, 4))
    doc = export_graph(gm, inputs=[InputSpec("buffer", "bn.running_mean"), InputSpec("user_input")],
                       outputs=[OutputSpec("loss"), OutputSpec("buffer_mutation", "bn.running_mean")],
                       graph_meta={"buffer_init": {"bn.running_mean": "zeros"}})
    write_graph(doc, tmp_path / "g.json")
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(5))
    x_name = [i["name"] for i in doc["inputs"] if i["kind"] == "user_input"][0]
    save_file({x_name: x}, tmp_path / "batch.safetensors")
    r = subprocess.run([str(jfx_bin), "exec", str(tmp_path / "g.json"), "--steps", "3",
                        "--optimizer", "none", "--batch", str(tmp_path / "batch.safetensors"),
                        "--save-grads", str(tmp_path / "out"), "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rm = torch.zeros(4)
    for s in (1, 2, 3):
        rm = torch.lerp(rm, x.mean(0), 0.1)
        got = load_file(tmp_path / "out" / f"grads.step{s}.rank0.safetensors")
        assert torch.equal(got["buffer:bn.running_mean"], rm), s


@pytest.mark.parametrize("world", WORLDS)
def test_exec_and_the_graphmodule_update_buffers_alike(world: int, jfx_bin: Path,
                                                       tmp_path: Path) -> None:
    """jointfx exec and PyTorch calling the same GraphModule (jointfx.reference, gloo ranks):
    loss, gradients and every updated buffer bitwise equal after each of 3 steps."""
    from safetensors.torch import load_file, save_file

    from jointfx import reference

    model = CASE.build(WEIGHT_SEED)
    state = {k: v.detach().contiguous() for k, v in model.named_parameters()}
    state.update({k: v.detach().contiguous() for k, v in model.named_buffers()})
    save_file(state, tmp_path / "params.safetensors")
    (images,), (labels,) = CASE.batch(7)
    save_file({"images": images, "labels": labels}, tmp_path / "batch.safetensors")
    common = ["--params", str(tmp_path / "params.safetensors"),
              "--batch", str(tmp_path / "batch.safetensors")]
    r = subprocess.run([str(jfx_bin), "exec", str(fixture(world)), "--nproc", str(world),
                        "--steps", str(STEPS), "--optimizer", "none", "--threads", "1",
                        "--save-grads", str(tmp_path / "exec"), "--quiet", *common],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    reference.run(fixture(world), nproc=world, params=tmp_path / "params.safetensors",
                  batch=tmp_path / "batch.safetensors", steps=STEPS,
                  save_grads=tmp_path / "torch", threads=1)
    for step in range(1, STEPS + 1):
        for rank in range(world):
            name = f"grads.step{step}.rank{rank}.safetensors"
            ours, theirs = load_file(tmp_path / "exec" / name), load_file(tmp_path / "torch" / name)
            assert sorted(ours) == sorted(theirs)
            assert sum(k.startswith("buffer:") for k in ours) == len(bn_buffers())
            for key in ours:
                assert torch.equal(ours[key], theirs[key]), (step, rank, key)
