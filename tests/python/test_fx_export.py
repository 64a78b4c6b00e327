"""The extension's export_nodes writes the same document as the Python exporter.

run_pipeline exports through jointfx._C.export_nodes (jointfx.export.export_text); export_graph
is the definition. Compared as canonical text, so an int written where the Python exporter
writes a float (or any other difference a value comparison would hide) fails.
"""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path

import pytest
import torch
from torch import fx
from torch.utils.checkpoint import CheckpointPolicy

import jointfx
from jointfx.export import (
    Opaque,
    dumps_graph,
    export_graph,
    export_native,
    export_text,
    import_graph,
    load_graph,
)

from test_export import _all_kinds_graph, _fake

ext = pytest.importorskip("jointfx._C")
# The hand-made graphs have collectives and no parameter specs; the exporter says so each time.
pytestmark = pytest.mark.filterwarnings("ignore:export_graph. no input specs")
REPO = Path(__file__).resolve().parents[2]
FIXTURES = sorted((REPO / "tests" / "data" / "traced").glob("*.json")) + sorted(
    (REPO / "tests" / "data" / "buffers").glob("*.json"))


def _same(gm: fx.GraphModule, **header: object) -> tuple[int, int]:
    """Checks the exporters against each other; returns export_native's (nodes built from the
    FX objects, nodes read as JSON)."""
    for stack in (False, True):
        want = dumps_graph(export_graph(gm, include_stack_trace=stack, **header))
        native = export_text(gm, extension=ext, include_stack_trace=stack, **header)
        assert dumps_graph(json.loads(native.text)) == want
        python = export_text(gm, include_stack_trace=stack, **header)
        assert dumps_graph(json.loads(python.text)) == want
        # The graph built from the FX objects is the one the C++ reader makes of the text.
        built = export_native(gm, extension=ext, include_stack_trace=stack, **header)
        assert built.text is None and built.graph is not None
        counts = built.graph.direct, built.graph.via_json
        assert sum(counts) == len(gm.graph.nodes)
        read, _ = ext.run_pipeline_json(native.text, "", False, False)
        assert built.graph.json().decode() == read
    return counts


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_fixture_graphs(path: Path) -> None:
    direct, via_json = _same(import_graph(load_graph(path)))
    # Traced graphs are what the direct build is for: at most the odd node (the output, a dtype
    # or opaque argument, extra meta) goes through JSON.
    assert via_json * 10 < direct


def test_every_argument_kind() -> None:
    _same(_all_kinds_graph())


class _Color(enum.IntEnum):
    RED = 1


def test_values_the_extension_hands_to_python() -> None:
    """Symbolic-free but unusual values: each goes through the Python definition for it."""
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = _fake((2, 3))
    x.meta["stack_trace"] = 'File "m.py", line 1\n  y = "\\u00e9\\t"'
    big = g.call_function(torch.ops.aten.add.Scalar, (x, 2**62))
    big.meta["val"] = (_fake((2, 3)), None, 3)  # a tuple value with non-tensor items
    big.meta["recompute"] = CheckpointPolicy.MUST_SAVE  # an enum: _enum_int
    big.meta["seq_nr"] = _Color.RED  # an int subclass
    big.meta["custom"] = {"module_fqn": "layers.0", "note": "é\u2028\"q\"", "n": [1, 2.5, None]}
    big.meta["extra"] = {"deep": {"list": [True, False]}}
    big.meta["not_json"] = (1, 2)  # a tuple is not plain JSON data: dropped
    big.meta["nan"] = math.nan  # not finite: dropped
    big.meta[3] = "an int key"  # not a string key: dropped by both
    named = g.call_function(torch.ops.aten.clone.default,
                            (Opaque(type="slice", repr="slice(1, None, None)"),),
                            {"memory_format": torch.preserve_format})
    named.meta["val"] = 7  # a plain int value
    sized = g.call_function(torch.ops.aten.view.default, (x, torch.Size([3, 2])))
    sized.meta["val"] = [_fake((3, 2), torch.bfloat16)]
    g.output((big, named, sized))
    _same(fx.GraphModule(torch.nn.Module(), g))


def test_an_argument_past_64_bits_is_refused_with_its_place() -> None:
    """The C++ IR holds int64 arguments: a Python int past them was read as the nearest double
    (and a pass that rewrote the node would have written it back rounded)."""
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = _fake((2, 3))
    big = g.call_function(torch.ops.aten.add.Scalar, (x, 2**70))
    big.meta["val"] = _fake((2, 3))
    g.output((big,))
    with pytest.raises(jointfx.PipelineError, match=r"\(node 'add_scalar'\): error: integer "
                                                    r"1180591620717411303424 is out of the int64"):
        jointfx.run_pipeline(fx.GraphModule(torch.nn.Module(), g), "dce")


def test_traced_model_families() -> None:
    """Freshly traced graphs carry FX meta the fixtures do not (nn_module_stack, source_fn_stack,
    autograd_backward, stack traces): one per family."""
    from jointfx.models import trace_case
    from jointfx.trace import init_fake_world, trace_variant

    init_fake_world(2)
    traced = [trace_variant("sac", 2), trace_case("gpt2"), trace_case("moe")]
    for t in traced:
        direct, via_json = _same(t.gm, inputs=t.inputs, outputs=t.outputs,
                                 process_groups=t.process_groups, graph_meta=t.graph_meta)
        assert via_json * 10 < direct


def test_python_objects_become_opaque() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = _fake((4,))
    y = g.call_function(torch.ops.aten.clone.default, (x,), {"hint": slice(0, 2)})
    y.meta["val"] = _fake((4,))
    g.output(y)
    _same(fx.GraphModule(torch.nn.Module(), g))


def test_an_extension_failure_falls_back_to_the_python_exporter() -> None:
    class Broken:
        @staticmethod
        def export_nodes(*args: object) -> bytes:
            raise RuntimeError("boom")

    gm = _all_kinds_graph()
    got = export_text(gm, extension=Broken())
    assert dumps_graph(json.loads(got.text)) == dumps_graph(export_graph(gm))


def test_a_graph_the_reader_rejects_is_exported_as_text() -> None:
    """A forward reference: the direct build gives up, and reading the text says where."""
    from jointfx.passes import PipelineError, run_pipeline

    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = _fake((4,))
    a = g.call_function(torch.ops.aten.add.Tensor, (x, x))
    a.meta["val"] = _fake((4,))
    b = g.call_function(torch.ops.aten.neg.default, (x,))
    b.meta["val"] = _fake((4,))
    a.args = (x, b)  # `a` now reads `b`, defined after it
    g.output(a)
    gm = fx.GraphModule(torch.nn.Module(), g)
    got = export_native(gm, extension=ext)
    assert got.graph is None and got.document is got.text
    with pytest.raises(PipelineError, match="/nodes/1/args/1/node .*'neg_default' is used before its definition at /nodes/2"):
        run_pipeline(gm, "dce")


def test_torchtitan_traced_graph() -> None:
    """GraphTrainer's tracer: DTensor parameters flatten to local tensors plus DeviceMesh
    placeholders, whose values have no JSON form."""
    pytest.importorskip("torchtitan.experiments.graph_trainer.make_fx_tracer")
    from jointfx.export import specs_from_traced
    from jointfx.titan import init_fake_world, trace_llama3

    init_fake_world(2)
    tr = trace_llama3(1)
    _same(tr.traced.gm, **specs_from_traced(tr.traced, tr.model))


def test_symbolic_shapes() -> None:
    """A dynamic-shape trace: sizes are SymInts, so values go through val_to_json (which leaves
    them out) and SymInt arguments through arg_to_json."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.view(x.shape[0] * 2, -1) * 2).sum(0)

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 6))
    assert any(isinstance(n.meta.get("val"), torch.SymInt) for n in gm.graph.nodes)
    _same(gm)


def test_tensor_metadata_through_the_stable_c_abi(monkeypatch: pytest.MonkeyPatch) -> None:
    """graph_from_fx reads FakeTensor metadata through PyTorch's stable C ABI (_tensor_shim) on
    the pinned torch; without it, or when making its handles fails, the tensors are read through
    their attributes, and every fixture's graph is the same byte for byte (bf16 and int64 values,
    views with strides, multi-output values)."""
    import jointfx.export as export

    spec = export._tensor_shim()
    assert spec is not None, "the pinned torch has the AOTInductor shim: the fast path is tested"
    assert spec[6][6] is torch.float32 and torch.bfloat16 in spec[6].values()

    def fail(tensors: list) -> list:
        raise RuntimeError("no handles")

    graphs = {}
    for path in FIXTURES:
        gm = import_graph(load_graph(path))
        fakes = sum(isinstance(n.meta.get("val"), torch.Tensor) for n in gm.graph.nodes)
        assert fakes > 0
        graphs[path] = (gm, export_native(gm, extension=ext).graph.json())
    for shim in (None, (fail, *spec[1:])):
        monkeypatch.setattr(export, "_tensor_shim", lambda shim=shim: shim)
        for path, (gm, want) in graphs.items():
            assert export_native(gm, extension=ext).graph.json() == want, path.stem


def test_nodes_remember_their_fx_node() -> None:
    """Every node the bridge builds, from the FX objects or through its JSON, is located at the
    torch.fx node of its name (Graph::location), which errors about the node name."""
    gm = _all_kinds_graph()
    built = export_native(gm, extension=ext)
    assert built.graph is not None
    assert built.graph.direct > 0 and built.graph.via_json > 0  # both ways are checked
    for n in gm.graph.nodes:
        assert built.graph.location(n.name) == f"torch.fx graph (node '{n.name}')"
    assert built.graph.location("no_such_node") is None
