"""Real numerics: traced graphs run on real tensors over a gloo world of one rank.

For every variant, trace at world 1 (the same tracer as the fixtures, now on a real gloo group),
export -> canonical JSON -> import, run the original and the re-imported GraphModule on the same
real inputs, and require bitwise-equal outputs. A world-1 group keeps this in-process and exact;
the fixtures themselves (worlds 2 and 4) are checked for shapes in test_fixtures.py.

The graph is also compared with eager PyTorch on the unsharded model: at world 1 every collective
is an identity, so the loss and gradients must match eager autograd.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from conftest import ensure_gloo_world1
from jointfx.export import dumps_graph, import_graph
from jointfx.model import cross_entropy_loss
from jointfx.trace import VARIANTS, TracedGraph, build_model, real_inputs, trace_joint, variant_config


# Every test runs its graph on the gloo world of one; the module-scoped trace needs it too.
pytestmark = pytest.mark.usefixtures("gloo_world1")


@pytest.fixture(scope="module", params=VARIANTS)
def traced(request: pytest.FixtureRequest) -> TracedGraph:
    ensure_gloo_world1()
    return trace_joint(variant_config(request.param, world_size=1))


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a tensor: bitwise comparison, NaN payloads and signed zeros included."""
    return t.detach().reshape(-1).contiguous().view(torch.uint8)


def _run(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    with torch.no_grad():
        return list(gm(*inputs))


def test_reimported_graph_is_bitwise_equal(traced: TracedGraph) -> None:
    inputs = real_inputs(traced, seed=0)
    original = _run(traced.gm, inputs)
    reimported = import_graph(json.loads(dumps_graph(traced.export())))
    again = _run(reimported, inputs)
    assert len(original) == len(again) == 1 + len(traced.layouts)
    for i, (a, b) in enumerate(zip(original, again)):
        assert a.dtype == b.dtype and a.shape == b.shape, i
        assert torch.equal(_bits(a), _bits(b)), i
    assert torch.isfinite(original[0])


def test_graph_matches_eager_autograd(traced: TracedGraph) -> None:
    cfg = traced.config
    inputs = real_inputs(traced, seed=0)
    outputs = _run(traced.gm, inputs)
    model = build_model(replace(cfg, model=replace(cfg.model, tp_size=1)), seed=0)
    tokens, labels = inputs[-2], inputs[-1]
    loss = cross_entropy_loss(model(tokens), labels)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    # bf16 computes in bfloat16 where eager runs float32.
    tol = dict(rtol=2e-2, atol=5e-3) if cfg.param_dtype is torch.bfloat16 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outputs[0], loss.detach(), **tol)
    for lay, got, want in zip(traced.layouts, outputs[1:], grads):
        assert got.dtype == torch.float32, lay.fqn
        torch.testing.assert_close(got, want, **tol, msg=lambda m, f=lay.fqn: f"{f}: {m}")
