"""jointfx.trace results go straight into run_pipeline: the header travels with `traced.gm`,
keyword inputs (Hugging Face style calls), no collectives for parameter reads that only look at
metadata, and a clear error for data-dependent control flow."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

import jointfx
import jointfx.trace as jtrace
from conftest import REPO, TRACED_DIR
from jointfx import JointfxWarning, import_graph, load_graph, run_pipeline, specs_from_traced
from jointfx.export import export_graph, grad_mode
from jointfx.model import cross_entropy_loss
from jointfx.trace import TraceConfig, build_model, init_fake_world

AG = torch.ops._c10d_functional.all_gather_into_tensor.default
AR = torch.ops._c10d_functional.all_reduce.default
WAIT = torch.ops._c10d_functional.wait_tensor.default
DEFAULT_PIPELINE = "default"  # the shipped pipeline, by name


@pytest.fixture
def fake_world2() -> Iterator[None]:
    """A fake process group of 2 ranks for the test, then the world that was there before (the
    session's gloo world of one, or another fake world)."""
    before = (dist.get_backend(), dist.get_world_size()) if dist.is_initialized() else None
    init_fake_world(2)
    try:
        yield
    finally:
        dist.destroy_process_group()
        if before is not None and before[0] == "fake":
            init_fake_world(before[1])
        elif before is not None:
            store = dist.TCPStore("127.0.0.1", 0, 1, True)
            dist.init_process_group(before[0], store=store, rank=0, world_size=1)


def _gathers(gm: fx.GraphModule, phase: str) -> list[fx.Node]:
    """All-gathers of `phase` ("forward" / "backward"), by the node's own meta."""
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is AG:
            backward = n.meta.get("phase") == "backward" or bool(n.meta.get("autograd_backward"))
            if backward == (phase == "backward"):
                out.append(n)
    return out


def _llama() -> jtrace.TracedGraph:
    tokens = torch.zeros(2, 8, dtype=torch.long)
    return jointfx.trace(build_model(TraceConfig()), cross_entropy_loss, [tokens], [tokens.clone()],
                         world_size=2)


def _stats(report: dict) -> list[tuple[str, dict]]:
    return [(p["name"], p["stats"]) for p in report["passes"]]


# ----------------------------------------------------------------------------- the header


def test_the_header_travels_with_traced_gm(fake_world2: None) -> None:
    traced = _llama()
    header = traced.gm.meta["jointfx"]
    kinds = Counter(i["kind"] for i in header["inputs"])
    assert kinds == {"parameter": 21, "buffer": 2, "user_input": 2}
    assert [o["kind"] for o in header["outputs"]] == ["loss"] + ["gradient"] * 21
    assert header["process_groups"] == [{"name": "0", "ranks": [0, 1], "size": 2}]
    assert header["meta"]["mesh"] == {"dim_names": ["fsdp"], "shape": [2]}
    # The document exported from the bare GraphModule is the one from the TracedGraph's specs.
    assert export_graph(traced.gm) == traced.export()
    specs = specs_from_traced(traced)
    assert set(specs) == {"inputs", "outputs", "process_groups", "graph_meta"}
    assert export_graph(traced.gm, **specs) == traced.export()


def test_default_pipeline_on_traced_gm_does_the_fsdp_work(fake_world2: None) -> None:
    """run_pipeline(traced.gm, default) with no other argument: tag-fsdp tags, remat re-gathers
    in backward, bucket buckets, exactly as on the committed fixture of the same model (whose
    header comes from the file), and no finding is raised."""
    traced = _llama()
    assert not _gathers(traced.gm, "backward")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither a finding nor the exporter's no-specs warning
        gm = run_pipeline(traced.gm, DEFAULT_PIPELINE, strict=True)
    report = gm.meta["jointfx_report"]
    stats = dict(_stats(report))
    assert stats["tag-fsdp"]["chains-resharded"] > 0 and stats["tag-fsdp"]["nodes-tagged"] > 0
    assert stats["remat"]["nodes-cloned"] > 0
    assert stats["bucket"]["buckets.all_gather"] > 0 and stats["bucket"]["buckets.reduce_scatter"] > 0
    regathers = _gathers(gm, "backward")
    fixture = run_pipeline(import_graph(load_graph(TRACED_DIR / "fsdp_w2.json")), DEFAULT_PIPELINE)
    assert _stats(report) == _stats(fixture.meta["jointfx_report"])
    assert len(regathers) == len(_gathers(fixture, "backward")) == 1  # one bucket of re-gathers


def _is_backward(n: fx.Node) -> bool:
    return n.meta.get("phase") == "backward" or bool(n.meta.get("autograd_backward"))


def _read_in_backward(gather: fx.Node) -> bool:
    """Whether backward reads the gathered parameter (through its wait and views)."""
    todo, seen = [gather], set()
    while todo:
        n = todo.pop()
        for user in n.users:
            if _is_backward(user):
                return True
            if user not in seen and (user.target is WAIT or jtrace._is_view(user)):
                seen.add(user)
                todo.append(user)
    return False


def test_remat_regathers_every_resharded_chain_in_backward(fake_world2: None) -> None:
    """With every chain resharded, backward re-gathers each parameter it reads (all but the
    embedding, whose backward does not read its weight)."""
    traced = _llama()
    wanted = sum(_read_in_backward(n) for n in _gathers(traced.gm, "forward"))
    assert wanted == 20
    gm = run_pipeline(traced.gm, "tag-fsdp{reshard=always},remat", strict=True)
    assert gm.meta["jointfx_report"]["passes"][0]["stats"]["chains-resharded"] == 21
    assert len(_gathers(gm, "backward")) == wanted
    assert len(_gathers(gm, "forward")) == 21


def test_specs_from_traced_refuses_other_objects() -> None:
    with pytest.raises(TypeError, match="not a int"):
        specs_from_traced(3)


# ----------------------------------------------------------------------------- keyword inputs


class _DenseActDense(nn.Module):
    """transformers' T5DenseActDense: casts to wo's dtype before calling wo, reading wo.weight's
    metadata outside wo's own forward."""

    def __init__(self, d: int, ff: int) -> None:
        super().__init__()
        self.wi = nn.Linear(d, ff, bias=False)
        self.wo = nn.Linear(ff, d, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.wi(h))
        if (isinstance(self.wo.weight, torch.Tensor) and h.dtype != self.wo.weight.dtype
                and self.wo.weight.dtype != torch.int8):
            h = h.to(self.wo.weight.dtype)
        return self.wo(h)


class _TinyCausalLM(nn.Module):
    """A Hugging Face-style LM: forward(input_ids, attention_mask=None, labels=None) returns a
    dict with "logits", and "loss" when given labels."""

    def __init__(self, vocab: int = 11, d: int = 8, ff: int = 16) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([_DenseActDense(d, ff) for _ in range(2)])
        self.lm_head = nn.Linear(d, vocab)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        h = self.embed_tokens(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1).to(h.dtype)
        for layer in self.layers:
            h = h + layer(h)
        out = {"logits": self.lm_head(h)}
        if labels is not None:
            out["loss"] = _lm_loss(out["logits"], labels)
        return out


def _lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _lm_batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 11, (2, 5), generator=gen)
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    return {"input_ids": ids, "attention_mask": mask,
            "labels": torch.randint(0, 11, (2, 5), generator=gen)}


def _lm() -> _TinyCausalLM:
    torch.manual_seed(0)
    return _TinyCausalLM()


def _targets(gm: fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _user_inputs(traced: jtrace.TracedGraph) -> list[str]:
    return [p.name for p, s in zip(traced.gm.graph.find_nodes(op="placeholder"), traced.inputs)
            if s.kind == "user_input"]


def test_keyword_inputs_positional_and_keyword_calls_trace_alike(gloo_world1: None) -> None:
    """The same Hugging Face-style model traced three ways: positional (model(ids, mask),
    loss_fn(out, labels)), keyword (model(**batch) with labels, the model's own loss) and a
    pair (args, kwargs). Keyword graph inputs are named after the keys; all three compute the
    eager loss and gradients on a real gloo world of one."""
    batch = _lm_batch()
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
    positional = jointfx.trace(_lm(), lambda out, y: _lm_loss(out["logits"], y), [ids, mask],
                               [labels])
    keyword = jointfx.trace(_lm(), None, batch)
    pair = jointfx.trace(_lm(), lambda out, *, labels: _lm_loss(out["logits"], labels),
                         ([ids], {"attention_mask": mask}), {"labels": labels})
    assert _user_inputs(positional) == ["inputs_0", "inputs_1", "targets"]
    assert _user_inputs(keyword) == ["input_ids", "attention_mask", "labels"]
    assert _user_inputs(pair) == ["inputs", "attention_mask", "labels"]
    assert [i["name"] for i in keyword.graph_meta["model"]["inputs"]] == list(batch)
    assert _targets(positional.gm) == _targets(pair.gm)
    # One all-gather per parameter in forward: the dtype checks on wo.weight gather nothing.
    n_params = len(dict(_lm().named_parameters()))
    for traced in (positional, keyword, pair):
        assert len(_gathers(traced.gm, "forward")) == n_params

    eager_model = _lm()
    loss = eager_model(**batch)["loss"]
    grads = torch.autograd.grad(loss, list(eager_model.parameters()))
    for traced in (positional, keyword, pair):
        real = traced.real_inputs(_lm(), [ids, mask, labels])
        with grad_mode(traced.gm), torch.no_grad():
            got = list(traced.gm(*real))
        torch.testing.assert_close(got[0], loss.detach())
        for g, want in zip(got[1:], grads):
            torch.testing.assert_close(g, want)


def test_keyword_inputs_are_checked(gloo_world1: None) -> None:
    model, x = nn.Linear(4, 2), torch.randn(3, 4)
    with pytest.raises(TypeError, match=r"example_inputs\['x'\] is a float, expected a tensor"):
        jointfx.trace(model, None, {"x": 1.0})
    with pytest.raises(TypeError, match="key 'not a name' is not a keyword argument name"):
        jointfx.trace(model, None, {"not a name": x})
    with pytest.raises(TypeError, match="example_inputs is a int"):
        jointfx.trace(model, None, 3)
    with pytest.raises(TypeError, match="loss_fn=None the model must return"):
        jointfx.trace(_lm(), None, {"input_ids": _lm_batch()["input_ids"]})  # no labels


# ----------------------------------------------------------------------------- metadata reads


class _ReadsMetadata(nn.Module):
    """Reads parameters of submodules outside their forward: dtype, shape, device and
    requires_grad only (no collective wanted), and proj.weight for its value (gathered)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.proj = nn.Linear(4, 4, bias=False)
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.lin.weight
        assert w.dtype == torch.float32 and tuple(w.shape) == (4, 4) and w.requires_grad
        assert self.lin.bias.device.type == "cpu" and self.out.weight.dim() == 2
        if x.dtype != self.out.weight.dtype:
            x = x.to(self.out.weight.dtype)
        h = F.linear(self.lin(x), self.proj.weight)  # proj's value, read outside proj
        return self.out(h).sum()


def test_metadata_reads_gather_nothing(fake_world2: None, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _ReadsMetadata()
    x = torch.randn(3, 4)
    traced = jointfx.trace(model, None, [x])
    forward = _gathers(traced.gm, "forward")
    assert len(forward) == 5  # lin.weight, lin.bias, proj.weight, out.weight, out.bias
    sources = sorted(n.args[0].name for n in forward)
    assert sources == ["lin_bias", "lin_weight", "out_bias", "out_weight", "proj_weight"]
    assert all(n.users for n in forward)
    # Without taking the unused reads out, each metadata read leaves a dead gather chain.
    monkeypatch.setattr(jtrace, "drop_unused_reads", lambda graph, chains: 0)
    kept = jointfx.trace(model, None, [x])
    dead = [n for n in _gathers(kept.gm, "forward") if not next(iter(n.users)).users]
    assert len(dead) == 4  # lin.weight (read once, looked at thrice), lin.bias, out.weight x2


class _DeadCollective(nn.Module):
    """A model whose own all-reduce result is never used."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        group = dist.group.WORLD
        assert group is not None
        torch.ops._c10d_functional.all_reduce(x.clone(), "sum", group.group_name)
        return self.lin(x).sum()


def test_a_collective_the_model_wrote_stays(fake_world2: None) -> None:
    traced = jointfx.trace(_DeadCollective(), None, [torch.randn(2, 4)])
    assert _targets(traced.gm).count(str(AR)) == 1


def test_a_t5_with_transformers_dtype_check(fake_world2: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """jointfx.models' 2-layer T5 with transformers' T5DenseActDense.forward (its wo.weight
    dtype check): the same graph as without the check, one gather per wo.weight in forward
    (the 8 dead gathers of two reads in each of 4 blocks are gone)."""
    from jointfx.models import t5, trace_case

    plain = trace_case("t5", 2)
    monkeypatch.setattr(t5.T5DenseReluDense, "forward", _DenseActDense.forward)
    checked = trace_case("t5", 2)
    assert _targets(checked.gm) == _targets(plain.gm)

    def wo_gathers(gm: fx.GraphModule) -> int:
        return sum(1 for n in _gathers(gm, "forward")
                   if n.args[0].name.endswith("_dense_relu_dense_wo_weight"))

    assert wo_gathers(checked.gm) == 4
    monkeypatch.setattr(jtrace, "drop_unused_reads", lambda graph, chains: 0)
    assert wo_gathers(trace_case("t5", 2).gm) == 4 + 8


# ----------------------------------------------------------------------------- control flow


class _Branches(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if self.how == "if":
            return y.sum() if y.sum() > 0 else -y.sum()
        if self.how == "where":
            return torch.where(y.sum() > 0, y.sum(), -y.sum())
        return torch.cond(y.sum() > 0, lambda t: t * 2, lambda t: t.neg(), (y,)).sum()


def test_data_dependent_control_flow_is_refused_with_the_way_out(fake_world2: None) -> None:
    with pytest.raises(ValueError, match=r"control flow depends on a tensor's value .*torch\.where"):
        jointfx.trace(_Branches("if"), None, [torch.randn(2, 4)])
    # What the message and docs/pytorch-bridge.md offer instead traces.
    where = jointfx.trace(_Branches("where"), None, [torch.randn(2, 4)])
    assert str(torch.ops.aten.where.self) in _targets(where.gm)
    cond = jointfx.trace(_Branches("cond"), None, [torch.randn(2, 4)])
    assert "cond" in _targets(cond.gm)
    # One module, no blocks: the default plan buckets it whole, as FSDP2 wraps a lone root
    # module (the reference plan's bound allows it), and there is nothing to report.
    with warnings.catch_warnings():
        warnings.simplefilter("error", JointfxWarning)
        gm = run_pipeline(cond.gm, DEFAULT_PIPELINE)
    stats = {p["name"]: p["stats"] for p in gm.meta["jointfx_report"]["passes"]}
    assert stats["bucket"]["buckets.all_gather"] == stats["bucket"]["buckets.reduce_scatter"] == 1
    assert "cond" in _targets(gm)
