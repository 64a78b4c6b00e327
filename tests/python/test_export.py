"""Exporter/importer unit tests on small hand-built and make_fx graphs."""

from __future__ import annotations

import json
import math
import operator
import re

import pytest
import torch
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.checkpoint import CheckpointPolicy

from jointfx.export import (
    ExportError,
    InputSpec,
    Opaque,
    OutputSpec,
    ProcessGroupSpec,
    arg_to_json,
    dumps_graph,
    export_graph,
    import_graph,
)

aten = torch.ops.aten


def _roundtrip(doc: dict) -> dict:
    """doc -> canonical text -> parse -> import -> export."""
    return export_graph(import_graph(json.loads(dumps_graph(doc))))


def _fake(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.empty(shape, dtype=dtype)


def _all_kinds_graph() -> fx.GraphModule:
    """One node per argument type the format knows (and an opaque one)."""
    g = fx.Graph()

    def call(name: str, target: object, args: tuple, kwargs: dict | None = None) -> fx.Node:
        return g.create_node("call_function", target, args, kwargs or {}, name=name)

    x = g.placeholder("x")
    x.meta["val"] = _fake((2, 3))
    full = call("full", aten.full.default, ([2, 3], -math.inf),
                {"dtype": torch.bfloat16, "layout": torch.strided,
                 "device": torch.device("cpu"), "pin_memory": False})
    nan = call("fill", aten.fill.Scalar, (full, math.nan))
    inf = call("clamp", aten.clamp.default, (x, None, math.inf))
    clone = call("clone", aten.clone.default, (x,), {"memory_format": torch.contiguous_format})
    add = call("add", aten.add.Tensor, (clone, inf), {"alpha": 2})
    scaled = call("mul", aten.mul.Scalar, (add, 1e-06))
    view = call("view", aten.view.default, (scaled, (3, 2)))  # a tuple argument
    split = call("split", aten.split_with_sizes.default, (x, [1, 2], 1))
    item = call("getitem", operator.getitem, (split, 0))
    cast = call("convert_element_type", torch.ops.prims.convert_element_type.default,
                (item, torch.float16))
    total = call("sum_1", aten.sum.dim_IntList, (x, [0], True), {"dtype": None})
    opaque = call("clone_1", aten.clone.default,
                  (Opaque(type="slice", repr="slice(0, 2, None)"),))
    ag = call("all_gather_into_tensor", torch.ops._c10d_functional.all_gather_into_tensor.default,
              (x, 2, "0"))
    wait = call("wait_tensor", torch.ops._c10d_functional.wait_tensor.default, (ag,))
    g.output([view, nan, cast, total, opaque, wait, "label", True])
    return fx.GraphModule(torch.nn.Module(), g)


def test_argument_encodings() -> None:
    doc = export_graph(_all_kinds_graph())
    by_name = {n["name"]: n for n in doc["nodes"]}
    assert by_name["full"]["args"] == [[2, 3], {"float": "-inf"}]
    assert by_name["full"]["kwargs"] == {
        "device": {"device": "cpu"}, "dtype": {"dtype": "bfloat16"},
        "layout": {"layout": "torch.strided"}, "pin_memory": False}
    assert by_name["fill"]["args"][1] == {"float": "nan"}
    assert by_name["clamp"]["args"] == [{"node": "x"}, None, {"float": "inf"}]
    assert by_name["clone"]["kwargs"] == {"memory_format": {"memory_format": "torch.contiguous_format"}}
    assert by_name["add"]["kwargs"] == {"alpha": 2}
    assert by_name["mul"]["args"][1] == 1e-06
    assert by_name["view"]["args"][1] == {"tuple": [3, 2]}
    assert by_name["convert_element_type"]["args"][1] == {"dtype": "float16"}
    assert by_name["clone_1"]["args"][0] == {"opaque": {"repr": "slice(0, 2, None)", "type": "slice"}}
    assert by_name["output"]["args"][0][-2:] == ["label", True]


def test_target_names() -> None:
    doc = export_graph(_all_kinds_graph())
    targets = {n["name"]: n["target"] for n in doc["nodes"]}
    assert targets["getitem"] == "operator.getitem"
    assert targets["convert_element_type"] == "prims.convert_element_type.default"
    assert targets["all_gather_into_tensor"] == "_c10d_functional.all_gather_into_tensor.default"
    assert targets["wait_tensor"] == "_c10d_functional.wait_tensor.default"
    assert targets["sum_1"] == "aten.sum.dim_IntList"
    assert targets["x"] == "x" and targets["output"] == "output"


def test_roundtrip_keeps_everything() -> None:
    gm = _all_kinds_graph()
    doc = export_graph(gm)
    again = _roundtrip(doc)
    assert again == doc
    imported = import_graph(doc)
    for a, b in zip(gm.graph.nodes, imported.graph.nodes):
        assert (a.name, a.op, a.target) == (b.name, b.op, b.target)
        # Args compare structurally; nan != nan, so compare their JSON forms.
        assert arg_to_json(a.args, a.name) == arg_to_json(b.args, b.name)
        assert arg_to_json(a.kwargs, a.name) == arg_to_json(b.kwargs, b.name)
    assert isinstance(imported.graph.find_nodes(op="call_function", target=aten.full.default)[0]
                      .kwargs["dtype"], torch.dtype)


def test_canonical_text_layout() -> None:
    doc = export_graph(_all_kinds_graph(), process_groups=[ProcessGroupSpec("0", (0, 1))])
    text = dumps_graph(doc)
    lines = text.splitlines()
    assert lines[:4] == ['{', '"format":"jointfx.graph",', '"version":1,', '"process_groups":[']
    assert lines[4] == '{"name":"0","ranks":[0,1],"size":2}'
    assert text.endswith("\n]\n}\n")
    node_lines = lines[lines.index('"nodes":[') + 1:-2]
    assert len(node_lines) == len(doc["nodes"])
    assert all(" " not in line.replace("slice(0, 2, None)", "") for line in node_lines)
    # Deterministic: same text from a re-export, and keys sorted inside every object.
    assert dumps_graph(_roundtrip(doc)) == text
    first = json.loads(node_lines[1].rstrip(","))
    assert list(first) == sorted(first)


def test_empty_outputs_and_meta_are_left_out() -> None:
    g = fx.Graph()
    g.output([])
    text = dumps_graph(export_graph(fx.GraphModule(torch.nn.Module(), g)))
    assert text == ('{\n"format":"jointfx.graph",\n"version":1,\n"process_groups":[],\n'
                    '"inputs":[],\n"nodes":[\n'
                    '{"args":[[]],"kwargs":{},"meta":{},"name":"output","op":"output",'
                    '"target":"output"}\n]\n}\n')


def test_node_meta_typed_kept_and_dropped() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta.update(val=_fake((4,)), seq_nr=-1)
    y = g.call_function(aten.neg.default, (x,))
    y.meta.update(
        val=_fake((4,)), recompute=CheckpointPolicy.MUST_RECOMPUTE, ac_graph_id=3, seq_nr=7,
        custom={"module_fqn": "layers.0"}, stack_trace="File x.py, line 1",
        autograd_backward=True, is_gradient_acc=True, my_tag={"a": [1, 2.5]},
        nn_module_stack={"k": ("layers.0", torch.nn.Linear)},
        original_aten=aten.neg.default, tensor_meta=object(), nan_value=math.nan)
    g.output([y])
    gm = fx.GraphModule(torch.nn.Module(), g)
    meta = export_graph(gm)["nodes"][1]["meta"]
    assert meta == {
        "ac_graph_id": 3, "custom": {"module_fqn": "layers.0"}, "is_gradient_acc": True,
        "my_tag": {"a": [1, 2.5]}, "phase": "backward", "recompute": 2, "seq_nr": 7,
        "val": {"device": "cpu", "dtype": "float32", "shape": [4], "stride": [1]}}
    with_trace = export_graph(gm, include_stack_trace=True)["nodes"][1]["meta"]
    assert with_trace["stack_trace"] == "File x.py, line 1"
    imported = import_graph(export_graph(gm, include_stack_trace=True))
    neg = imported.graph.find_nodes(op="call_function", target=aten.neg.default)[0]
    assert neg.meta["recompute"] is CheckpointPolicy.MUST_RECOMPUTE
    assert neg.meta["autograd_backward"] is True and neg.meta["phase"] == "backward"
    assert neg.meta["stack_trace"] == "File x.py, line 1"
    assert neg.meta["val"].shape == (4,) and neg.meta["val"].dtype == torch.float32


def test_multi_output_val_is_an_array() -> None:
    def f(x: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.ops.aten.var_mean.correction(x, [0], correction=0))

    gm = make_fx(f, tracing_mode="fake")(torch.randn(3, 4))
    doc = export_graph(gm)
    var_mean = next(n for n in doc["nodes"] if n["target"] == "aten.var_mean.correction")
    assert [v["shape"] for v in var_mean["meta"]["val"]] == [[4], [4]]
    imported = import_graph(doc)
    vm = imported.graph.find_nodes(op="call_function", target=aten.var_mean.correction)[0]
    assert isinstance(vm.meta["val"], tuple) and len(vm.meta["val"]) == 2
    assert _roundtrip(doc) == doc


def _plain_joint() -> fx.GraphModule:
    """A joint graph traced with bare make_fx: no autograd_backward, no annotations."""
    def step(w: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
        loss = torch.relu(x @ w.t()).sum()
        return [loss, *torch.autograd.grad(loss, [w])]

    return make_fx(step, tracing_mode="fake")(torch.randn(4, 8, requires_grad=True),
                                             torch.randn(3, 8))


def test_phase_fallback_rules_without_autograd_backward() -> None:
    gm = _plain_joint()
    assert not any("autograd_backward" in n.meta for n in gm.graph.nodes)
    doc = export_graph(gm, inputs=[InputSpec("parameter", "w"), InputSpec("user_input")],
                       outputs=[OutputSpec("loss"), OutputSpec("gradient", "w")])
    phase: dict[str, str] = {}  # target -> phase of its first node
    for n in doc["nodes"]:
        if n["op"] == "call_function":
            phase.setdefault(n["target"], n["meta"]["phase"])
    # mm reads the parameter: forward. relu and sum sit between it and the loss: loss.
    assert phase["aten.mm.default"] == "forward"
    assert phase["aten.relu.default"] == "loss"
    assert phase["aten.sum.default"] == "loss"
    assert phase["aten.ones_like.default"] == "backward"
    assert phase["aten.threshold_backward.default"] == "backward"
    phases = [n["meta"]["phase"] for n in doc["nodes"] if n["op"] == "call_function"]
    assert phases == sorted(phases, key=["forward", "loss", "backward"].index)
    assert all("phase" not in n["meta"] for n in doc["nodes"] if n["op"] != "call_function")


def test_phase_of_a_loss_side_result_taken_after_the_loss() -> None:
    """A model computing its own loss (no loss annotation) by nll_loss_forward: the total weight
    (its second result, read by nll_loss_backward) comes after the loss output in program order
    and is not backward; it is loss, so the phases stay forward, loss, backward."""
    def step(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        loss = torch.nn.functional.cross_entropy(x @ w.t(), y)
        return [loss, *torch.autograd.grad(loss, [w])]

    gm = make_fx(step, tracing_mode="fake")(torch.randn(4, 8, requires_grad=True),
                                            torch.randn(3, 8), torch.tensor([0, 3, 1]))
    backward = False
    for n in gm.graph.nodes:  # what jointfx.trace's hooks record: autograd's own nodes
        backward = backward or n.target is aten.ones_like.default
        if n.op == "call_function":
            n.meta["autograd_backward"] = backward
    nll = gm.graph.find_nodes(op="call_function", target=aten.nll_loss_forward.default)[0]
    loss_out, total_weight = sorted(nll.users, key=lambda u: u.args[1])
    order = list(gm.graph.nodes)
    assert order.index(total_weight) > order.index(loss_out)  # after the loss output
    doc = export_graph(gm, inputs=[InputSpec("parameter", "w"), InputSpec("user_input"),
                                   InputSpec("user_input")],
                       outputs=[OutputSpec("loss"), OutputSpec("gradient", "w")])
    by_name = {n["name"]: n for n in doc["nodes"]}
    assert by_name[total_weight.name]["meta"]["phase"] == "loss"
    assert by_name[nll.name]["meta"]["phase"] == "loss"
    assert by_name["mm"]["meta"]["phase"] == "forward"
    phases = [n["meta"]["phase"] for n in doc["nodes"] if n["op"] == "call_function"]
    assert phases == sorted(phases, key=["forward", "loss", "backward"].index)


def test_phase_from_annotations_and_import_wins() -> None:
    gm = _plain_joint()
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is aten.sum.default:
            n.meta["custom"] = {"module_fqn": "loss"}
    doc = export_graph(gm, outputs=[OutputSpec("loss"), OutputSpec("gradient", "w")])
    loss_nodes = [n["target"] for n in doc["nodes"] if n["meta"].get("phase") == "loss"]
    assert loss_nodes == ["aten.sum.default"]  # the annotation decides, not the fallback
    # meta["phase"] written by import_graph takes precedence on re-export.
    imported = import_graph(doc)
    assert export_graph(imported) == doc


def test_header_specs_and_defaults() -> None:
    gm = _plain_joint()
    doc = export_graph(gm, process_groups=[{"name": "fsdp", "ranks": [0, 2]}],
                       inputs=[InputSpec("parameter", "w"), {"kind": "user_input"}],
                       outputs=[OutputSpec("loss"), OutputSpec("gradient", "w")],
                       graph_meta={"world_size": 4})
    assert doc["process_groups"] == [{"name": "fsdp", "ranks": [0, 2], "size": 2}]
    assert doc["inputs"] == [{"fqn": "w", "kind": "parameter", "name": "w_1"},
                             {"kind": "user_input", "name": "x_1"}]
    assert doc["outputs"] == [{"kind": "loss"}, {"fqn": "w", "kind": "gradient"}]
    assert doc["meta"] == {"world_size": 4}
    plain = export_graph(gm)
    assert [i["kind"] for i in plain["inputs"]] == ["user_input", "user_input"]
    assert [o["kind"] for o in plain["outputs"]] == ["other", "other"]
    with pytest.raises(ExportError, match="input specs"):
        export_graph(gm, inputs=[InputSpec("parameter", "w")])


def test_import_errors_name_the_problem() -> None:
    doc = export_graph(_plain_joint())
    with pytest.raises(ExportError, match="unsupported version 2"):
        import_graph({**doc, "version": 2})
    with pytest.raises(ExportError, match="not a jointfx graph"):
        import_graph({**doc, "format": "other"})
    bad = json.loads(json.dumps(doc))
    bad["nodes"][3]["args"][0] = {"node": "nowhere"}
    name = bad["nodes"][3]["name"]
    with pytest.raises(ExportError, match=re.escape(f"at /nodes/3/args/0/node (node '{name}'): ")
                       + ".*'nowhere'"):
        import_graph(bad)
    bad = json.loads(json.dumps(doc))
    bad["nodes"][3]["target"] = "aten.no_such_op.default"
    with pytest.raises(ExportError, match="no_such_op"):
        import_graph(bad)


def test_scalar_vals_including_non_finite() -> None:
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = _fake((2,))
    for name, value in (("a", 3), ("b", 0.5), ("c", math.inf), ("d", True), ("e", None)):
        node = g.create_node("call_function", aten.sym_size.int, (x, 0), name=name)
        node.meta["val"] = value
    g.output([x])
    doc = export_graph(fx.GraphModule(torch.nn.Module(), g))
    vals = {n["name"]: n["meta"]["val"] for n in doc["nodes"] if n["name"] in "abcde"}
    assert vals == {"a": 3, "b": 0.5, "c": {"float": "inf"}, "d": True, "e": None}
    imported = import_graph(doc)
    assert imported.graph.find_nodes(op="call_function", target=aten.sym_size.int)[2].meta["val"] == math.inf
    assert _roundtrip(doc) == doc



def _nested_cond(x: torch.Tensor) -> torch.Tensor:
    """torch.cond whose true branch holds another torch.cond and a tensor constant: make_fx
    writes three GraphModules, one inside another, and the constant inside the inner one."""

    def inner_true(t: torch.Tensor) -> torch.Tensor:
        return t * torch.tensor([1.0, 2.0, 3.0])

    def outer_true(t: torch.Tensor) -> torch.Tensor:
        return torch.cond(t.mean() > 1, inner_true, torch.sin, (t,)) + 1

    return torch.cond(x.sum() > 0, outer_true, torch.cos, (x,))


def test_higher_order_subgraphs_roundtrip_nested() -> None:
    """Subgraphs go into meta["subgraphs"] by get_attr target, each with its own constants and
    subgraphs; import_graph rebuilds them (three levels here) and the graph computes what the
    traced one does on inputs that take each branch; export(import(doc)) == doc."""
    gm = make_fx(_nested_cond)(torch.randn(3))
    doc = export_graph(gm)
    subs = doc["meta"]["subgraphs"]
    assert sorted(subs) == ["false_graph_0", "true_graph_0"]
    inner = subs["true_graph_0"]["subgraphs"]
    assert sorted(inner) == ["false_graph_0", "true_graph_0"]
    assert [c["shape"] for c in inner["true_graph_0"]["constants"]] == [[3]]
    assert _roundtrip(doc) == doc
    imported = import_graph(json.loads(dumps_graph(doc)))
    assert isinstance(imported.true_graph_0.true_graph_0, fx.GraphModule)
    for x in (torch.tensor([2.0, 3.0, 4.0]), torch.tensor([0.1, 0.2, 0.3]),
              torch.tensor([-1.0, -2.0, 0.5])):
        # A graph's outputs are a list in the format; a subgraph returns what it returned.
        [got] = imported(x)
        assert torch.equal(got, gm(x)) and torch.equal(gm(x), _nested_cond(x))
        for name in ("true_graph_0", "false_graph_0"):
            sub, again = getattr(gm, name)(x), getattr(imported, name)(x)
            assert type(again) is type(sub) is tuple and torch.equal(again[0], sub[0])


def test_a_get_attr_the_document_cannot_carry_is_said() -> None:
    """A get_attr whose value is neither a tensor nor a GraphModule is named in a warning."""
    gm = make_fx(lambda x: x + 1)(torch.randn(2))
    with gm.graph.inserting_before(gm.graph.output_node()):
        gm.graph.create_node("get_attr", "table", name="table")
    gm.table = {"rows": 3}
    with pytest.warns(UserWarning, match=r"get_attr 'table' \(dict\) is neither a tensor nor a "
                                         r"GraphModule: the document cannot carry its value"):
        export_graph(gm)


@torch.library.custom_op("jointfx_test::scaled_add", mutates_args=())
def _scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    return x + alpha * y


@_scaled_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("jointfx_test::bump_", mutates_args=("x",))
def _bump(x: torch.Tensor) -> None:
    x.add_(1)


def test_custom_ops_carry_their_schema(jfx_bin, tmp_path) -> None:
    """A custom op's registered schema goes into graph meta "op_schemas" (aten ops do not); the
    CLI loads it (golden remat/custom_op_schema.jfx shows what the passes make of it) and the
    round trip keeps it."""
    import subprocess

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = torch.ops.jointfx_test.scaled_add(x, y, alpha=2.0)
        torch.ops.jointfx_test.bump_(y)
        return z.sin()

    gm = make_fx(f)(torch.ones(4), torch.ones(4))
    doc = export_graph(gm)
    schemas = doc["meta"]["op_schemas"]
    assert set(schemas) == {"jointfx_test.scaled_add.default", "jointfx_test.bump_.default"}
    assert schemas["jointfx_test.scaled_add.default"] == {
        "random": False,
        "schema": "jointfx_test::scaled_add(Tensor x, Tensor y, float alpha=1.) -> Tensor"}
    assert schemas["jointfx_test.bump_.default"]["schema"] == "jointfx_test::bump_(Tensor(a0!) x) -> ()"
    path = tmp_path / "g.json"
    path.write_text(dumps_graph(doc))
    r = subprocess.run([str(jfx_bin), "verify", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # The round trip keeps them.
    assert _roundtrip(doc)["meta"]["op_schemas"] == schemas
