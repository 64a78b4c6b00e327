"""Hostile graph files and paths through the Python side (docs/graph-format.md "Names are data",
"Input limits", "Writing outputs"; docs/pytorch-bridge.md section 3).

1. A graph file is data: code in a placeholder target, a node name, a kwargs key or a get_attr
   target, and call_function targets such as builtins.exec, are refused by import_graph (and by
   the C++ verifier in run_pipeline_doc) with an ExportError naming the place, and the command in
   them never runs (a marker file is never created).
2. Every malformed document is an ExportError naming its place, never another exception.
3. load_graph is bounded by the CLI's input limit, write_graph follows the C++ writer's rules for
   what sits at the output path, and NaN and infinities are kept or refused, never changed.
"""

from __future__ import annotations

import builtins
import copy
import json
import keyword
import math
import os
import re
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import jointfx
from conftest import REPO, TRACED_DIR
from jointfx.export import (
    ExportError,
    _OPERATOR_TARGETS,
    _PYTHON_TARGETS,
    dumps_graph,
    export_graph,
    import_graph,
    is_attribute_path,
    is_identifier,
    load_graph,
    resolve_target,
    target_name,
    write_graph,
)


def _small_model(x: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    y = torch.nn.functional.linear(x, w) * torch.tensor([1.0, 2.0])  # a tensor constant
    a, b = torch.split(y, 1, dim=1)  # operator.getitem
    s = (a + b).sum()
    c = torch.cond(x.sum() > 0, torch.sin, torch.cos, (x,))  # subgraphs
    return [s, c, y.to(torch.float64)]  # a kwarg


_BASE: list[str] = []


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo_after() -> Any:
    """torch.cond runs and traces its branches through Dynamo, whose automatic dynamic shapes
    would make a later cond trace in this process (test_export's, of another input shape) lift
    sizes as operands: the modules after this one start from a clean cache."""
    yield
    torch._dynamo.reset()


def base_doc() -> dict[str, Any]:
    """A real traced graph with every part a document can have: placeholders, a tensor constant
    behind a get_attr, a tuple argument, kwargs, multi-output values with getitems, and a
    torch.cond with its two subgraphs. Node 4 is the get_attr, 16 the cond, 18 the node with a
    kwarg, 19 the output."""
    if not _BASE:
        # torch.cond traces its branches through Dynamo, whose cache an earlier test's cond may
        # have filled (then a branch lifts an extra operand): trace from a fresh cache.
        torch._dynamo.reset()
        gm = make_fx(_small_model)(torch.randn(3, 4), torch.randn(2, 4))
        _BASE.append(dumps_graph(export_graph(gm)))
    return json.loads(_BASE[0])


def node_index(doc: dict[str, Any], name: str) -> int:
    return next(i for i, n in enumerate(doc["nodes"]) if n["name"] == name)


def test_base_document_imports_and_runs() -> None:
    doc = base_doc()
    assert [n["op"] for n in doc["nodes"]].count("get_attr") == 3
    assert doc["nodes"][4]["target"] == "_tensor_constant0"
    assert doc["nodes"][16]["target"] == "higher_order.cond"
    assert doc["nodes"][18]["kwargs"] == {"dtype": {"dtype": "float64"}}
    gm = import_graph(doc)
    x, w = torch.randn(3, 4), torch.randn(2, 4)
    for got, want in zip(gm(x, w), _small_model(x, w)):
        assert torch.equal(got, want)


# ----------------------------------------------------------------------------- attacks


def _payload(marker: Path) -> str:
    return f"x=__import__('os').system('touch {marker}')"


def _dotless_payload(marker: Path) -> str:
    """For a get_attr target, which torch.fx splits at dots: no dot in the code."""
    assert "." not in str(marker)
    return (f'x") if getattr(__import__("os"), "system")("touch {marker}") else '
            'getattr(self, "x')


def _rename(doc: dict[str, Any], old: str, new: str) -> None:
    """Renames node `old` and every reference to it."""
    def fix(v: Any) -> Any:
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, dict):
            if v.keys() == {"node"} and v["node"] == old:
                return {"node": new}
            return {k: fix(x) for k, x in v.items()}
        return v

    for nd in doc["nodes"]:
        if nd["name"] == old:
            nd["name"] = new
        nd["args"] = fix(nd["args"])
        nd["kwargs"] = fix(nd["kwargs"])


def attack_placeholder_target(doc: dict[str, Any], marker: Path) -> str:
    doc["nodes"][0]["target"] = _payload(marker)
    return "/nodes/0/target (node 'x_1'): placeholder target \"x=__import__("


def attack_node_name(doc: dict[str, Any], marker: Path) -> str:
    _rename(doc, "mm", _payload(marker))
    return "/nodes/3/name (node \"x=__import__("


def attack_kwargs_key(doc: dict[str, Any], marker: Path) -> str:
    doc["nodes"][18]["kwargs"] = {f"dtype=None, x=__import__('os').system('touch {marker}'), "
                                  "layout": {"dtype": "float64"}}
    return "/nodes/18/kwargs/dtype=None, x=__import__('os')"


def attack_get_attr_target(doc: dict[str, Any], marker: Path) -> str:
    doc["nodes"][4]["target"] = _dotless_payload(marker)
    return "/nodes/4/target (node '_tensor_constant0'): get_attr target 'x\") if getattr("


def attack_exec_target(doc: dict[str, Any], marker: Path) -> str:
    # builtins.exec of a string argument, its result among the graph's outputs.
    doc["nodes"].insert(19, {"args": [f"__import__('os').system('touch {marker}')"],
                             "kwargs": {}, "meta": {}, "name": "ex", "op": "call_function",
                             "target": "builtins.exec"})
    doc["nodes"][20]["args"][0].append({"node": "ex"})
    doc["outputs"].append({"kind": "other"})
    return "/nodes/19/target (node 'ex'): unknown target 'builtins.exec'"


ATTACKS: dict[str, Callable[[dict[str, Any], Path], str]] = {
    "placeholder_target": attack_placeholder_target,
    "node_name": attack_node_name,
    "kwargs_key": attack_kwargs_key,
    "get_attr_target": attack_get_attr_target,
    "exec_target": attack_exec_target,
}


def _assert_refused(call: Callable[[], Any], where: str, marker: Path,
                    error: type[Exception] = ExportError) -> str:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert where in message, message
    assert not marker.exists(), "the graph file's code ran"
    return message


def _unchecked_module(attack: str, marker: Path) -> Callable[[], Any]:
    """The attack's string handed to torch.fx directly, as an importer without the checks did:
    what makes the module and calls it (the code runs in one or the other)."""
    g = torch.fx.Graph()
    if attack == "placeholder_target":  # a default of forward()'s parameter: runs at compile
        g.output(g.placeholder(_payload(marker)))
        return lambda: torch.fx.GraphModule(torch.nn.Module(), g)
    x = g.placeholder("x")
    if attack == "kwargs_key":  # a keyword argument of the call: runs when the module runs
        key = f"dtype=None, x=__import__('os').system('touch {marker}'), layout"
        g.output(g.call_function(torch.ops.aten.ones.default, ([2],), {key: torch.float64}))
        root: Any = torch.nn.Module()
    elif attack == "get_attr_target":  # getattr(self, "...") closed early
        target = _dotless_payload(marker)
        g.output(g.get_attr(target))
        root = {target: torch.zeros(1)}
    else:
        assert attack == "exec_target"
        g.output([x, g.call_function(builtins.exec,
                                     (f"__import__('os').system('touch {marker}')",))])
        root = torch.nn.Module()

    def run() -> None:
        gm = torch.fx.GraphModule(root, g)
        try:
            gm(torch.zeros(1))
        except (RuntimeError, AttributeError):  # after the code ran
            pass
    return run


@pytest.mark.parametrize("attack", ["placeholder_target", "kwargs_key", "get_attr_target",
                                    "exec_target"])
def test_each_attack_runs_its_command_when_torch_fx_gets_it_unchecked(
        attack: str, tmp_path: Path) -> None:
    """The control for the tests below: each payload is live (the marker appears when torch.fx
    gets it without the importer's checks), so its absence there means the checks stopped it.
    A node name is not among them: torch.fx replaces the characters of a name that is no
    identifier; the rule keeps it for the C++ side and the documents it writes."""
    marker = tmp_path / "pwned"
    _unchecked_module(attack, marker)()
    assert marker.exists()


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_refused_by_import_graph(attack: str, tmp_path: Path) -> None:
    """The file as a user would load it: load_graph, then import_graph. Before the rule, each
    of these imported and ran the command (the exec target when the module was called)."""
    marker = tmp_path / "pwned"
    doc = base_doc()
    where = ATTACKS[attack](doc, marker)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    _assert_refused(lambda: import_graph(load_graph(path)), "at " + where, marker)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_in_a_real_fixture(attack: str, tmp_path: Path) -> None:
    """The same shapes planted in a committed traced graph (a real GraphTrainer-shaped trace)."""
    marker = tmp_path / "pwned"
    doc = json.loads((TRACED_DIR / "uneven_w4.json").read_text())
    nodes = doc["nodes"]
    placeholder = next(i for i, n in enumerate(nodes) if n["op"] == "placeholder")
    call = next(i for i, n in enumerate(nodes) if n["op"] == "call_function" and n["kwargs"])
    if attack == "placeholder_target":
        nodes[placeholder]["target"] = _payload(marker)
        where = f"/nodes/{placeholder}/target"
    elif attack == "node_name":
        _rename(doc, nodes[call]["name"], _payload(marker))
        where = f"/nodes/{call}/name"
    elif attack == "kwargs_key":
        nodes[call]["kwargs"][f"x=__import__('os').system('touch {marker}'), y"] = 1
        where = f"/nodes/{call}/kwargs/x=__import__("
    elif attack == "get_attr_target":
        nodes.insert(call, {"args": [], "kwargs": {}, "meta": {}, "name": "c", "op": "get_attr",
                            "target": _dotless_payload(marker)})
        where = f"/nodes/{call}/target (node 'c')"
    else:
        nodes.insert(call, {"args": [f"__import__('os').system('touch {marker}')"],
                            "kwargs": {}, "meta": {}, "name": "ex", "op": "call_function",
                            "target": "builtins.exec"})
        where = f"/nodes/{call}/target (node 'ex')"
    _assert_refused(lambda: import_graph(doc), "at " + where, marker)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_through_run_pipeline_doc(attack: str, tmp_path: Path) -> None:
    """In process: the C++ verifier refuses the names before any pass runs (rule identifier,
    naming the node); without verification the pipeline's result is refused by import_graph.
    builtins.exec is an op the C++ library does not know, which it carries; import refuses it."""
    pytest.importorskip("jointfx._C")
    marker = tmp_path / "pwned"
    doc = base_doc()
    where = ATTACKS[attack](doc, marker)
    if attack != "exec_target":
        message = _assert_refused(lambda: jointfx.run_pipeline_doc(doc, "dce"), "[identifier]",
                                  marker, jointfx.PipelineError)
        assert "input graph fails verification" in message
    out, _ = jointfx.run_pipeline_doc(doc, "dce", verify=False)
    _assert_refused(lambda: import_graph(out), where.split(" (node")[0].split(" ")[0][:14],
                    marker)


def test_attack_through_run_pipeline(tmp_path: Path) -> None:
    """run_pipeline takes a GraphModule: a hostile file never becomes one, and a GraphModule
    whose in-memory names are not identifiers is refused by the C++ verifier (verify=True, the
    default) before its document is applied."""
    pytest.importorskip("jointfx._C")
    marker = tmp_path / "pwned"
    gm = import_graph(base_doc())
    gm.graph.find_nodes(op="placeholder")[0].target = _payload(marker)
    with pytest.raises(jointfx.PipelineError, match=r"\[identifier\] placeholder target"):
        jointfx.run_pipeline(gm, "dce", in_place=False)
    assert not marker.exists()


def test_attack_jfx_form_through_the_cli(tmp_path: Path, jfx_bin: Path) -> None:
    """The text form `placeholder "<code>"` converted to JSON is the same JSON: convert refuses
    it (exit 1, nothing written), so no tool turns it into a file import_graph would read; the
    JSON the same text means is refused by import_graph."""
    marker = tmp_path / "pwned"
    text = (f'jointfx.graph 1\n%x : f32[4] = placeholder {json.dumps(_payload(marker))}\n'
            '%neg : f32[4] = aten.neg.default(%x)\n%output = output([%neg])\n')
    src = tmp_path / "g.jfx"
    src.write_text(text)
    for args in (["verify", src], ["convert", src, "-o", tmp_path / "g.json"],
                 ["opt", src, "-o", tmp_path / "o.json", "-p", "dce"],
                 ["opt", src, "-o", tmp_path / "o.json", "-p", "dce", "--no-verify"]):
        p = subprocess.run([jfx_bin, *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "node 'x': [identifier] placeholder target \"x=__import__(" in p.stdout + p.stderr
    assert sorted(os.listdir(tmp_path)) == ["g.jfx"]
    doc = {"format": "jointfx.graph", "version": 1, "nodes": [
        {"name": "x", "op": "placeholder", "target": _payload(marker),
         "meta": {"val": {"dtype": "float32", "shape": [4]}}},
        {"name": "neg", "op": "call_function", "target": "aten.neg.default",
         "args": [{"node": "x"}]},
        {"name": "output", "op": "output", "target": "output", "args": [[{"node": "neg"}]]}]}
    _assert_refused(lambda: import_graph(doc), "at /nodes/0/target (node 'x')", marker)


# ----------------------------------------------------------------------------- targets


def test_identifier_rule() -> None:
    for ok in ("x", "_", "mm_3", "primals_1", "match", "type", "print", "_0_weight"):
        assert is_identifier(ok)
    for bad in ("", "0x", "a b", "a.b", "x=1", "é", "class", "None", "lambda", "a\n", 3, None):
        assert not is_identifier(bad)
    for ok in ("a", "layers.0.weight", "_tensor_constant0", "a.b.c", "0"):
        assert is_attribute_path(ok)
    for bad in ("", "a.", ".a", "a..b", "a.class", 'x")', "a b"):
        assert not is_attribute_path(bad)


def test_every_allowed_target_resolves_and_round_trips() -> None:
    """The allow-list beyond torch operators: each resolves to what target_name names so."""
    names = [f"operator.{n}" for n in _OPERATOR_TARGETS] + list(_PYTHON_TARGETS)
    for name in names:
        fn = resolve_target(name)
        assert callable(fn)
        node = torch.fx.Graph().create_node("call_function", fn, ())
        assert target_name(node) == name
    for name in ("aten.mm.default", "aten.mm", "prims.convert_element_type.default",
                 "_c10d_functional.wait_tensor.default", "higher_order.cond"):
        assert isinstance(resolve_target(name), (torch._ops.OpOverload,
                                                 torch._ops.OpOverloadPacket,
                                                 torch._ops.HigherOrderOperator))


def test_every_target_of_every_fixture_resolves() -> None:
    targets = set()
    for path in sorted(TRACED_DIR.glob("*.json")):
        doc = json.loads(path.read_text())
        subgraphs = list(doc.get("meta", {}).get("subgraphs", {}).values())
        for nodes in [doc["nodes"], *(s["nodes"] for s in subgraphs)]:
            targets |= {n["target"] for n in nodes if n["op"] == "call_function"}
    assert len(targets) > 50
    for t in sorted(targets):
        resolve_target(t)


@pytest.mark.parametrize("target", [
    "builtins.exec", "builtins.eval", "builtins.getattr", "builtins.setattr", "builtins.open",
    "builtins.__import__", "builtins.compile", "operator.attrgetter", "operator.methodcaller",
    "operator.call", "operator.itemgetter", "os.system", "subprocess.run", "torch.load",
    "torch.jit.load", "torch.save", "math.sqrt", "import_module.__call__",
    "load_library.__call__", "aten.__class__", "aten.mm.__call__", "aten.mm.__class__",
    "higher_order.__class__", "higher_order.cond.__call__", "aten.mm.default.__call__",
    "jointfx._C.run_pipeline_json", "jointfx.export.load_graph", "torch.ops.aten.mm.default",
    "", ".", "aten..default", "aten.no_such_op.default", "aten.mm.no_such_overload",
    "operator.getitem.__globals__", "_operator.getitem",
])
def test_targets_that_could_run_code_are_refused(target: str) -> None:
    with pytest.raises(ExportError, match="unknown target"):
        resolve_target(target, "n")


def test_torch_ops_attributes_that_run_code_are_refused(tmp_path: Path) -> None:
    """torch.ops.import_module imports any module by name, and load_library loads a shared
    library: reached through a target, a file could run code without naming an operator."""
    module = tmp_path / "jfx_evil_module.py"
    marker = tmp_path / "pwned"
    module.write_text(f"open({str(marker)!r}, 'w').close()\n")
    doc = base_doc()
    doc["nodes"].insert(19, {"args": ["jfx_evil_module"], "name": "imp", "op": "call_function",
                             "target": "import_module.__call__"})
    _assert_refused(lambda: import_graph(doc), "at /nodes/19/target (node 'imp')", marker)


def test_a_node_named_opaque_cannot_stand_in_for_the_opaque_class(tmp_path: Path) -> None:
    """torch.fx writes an Opaque argument as `Opaque(type=..., repr=...)`; a node of that name
    would be called instead (here: a subgraph, with the repr as its input)."""
    doc = base_doc()
    _rename(doc, "mm", "Opaque")
    with pytest.raises(ExportError, match=r"at /nodes/3/name \(node 'Opaque'\): node name "
                                          r"'Opaque' is reserved"):
        import_graph(doc)
    doc = base_doc()
    doc["nodes"][0]["target"] = "self"
    with pytest.raises(ExportError, match=r"placeholder target 'self' is reserved"):
        import_graph(doc)


def test_meta_that_steers_torch_fx_code_generation_is_checked() -> None:
    """boxed_arg_indices and is_wrapped are read by torch.fx's code generator: well-typed ones
    are kept, others refused (a string index made fx.GraphModule raise a TypeError)."""
    doc = base_doc()
    doc["nodes"][3]["meta"]["boxed_arg_indices"] = [0]
    doc["nodes"][3]["meta"]["is_wrapped"] = False
    gm = import_graph(doc)
    mm = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.mm.default)[0]
    assert mm.meta["boxed_arg_indices"] == [0]
    for key, value in (("boxed_arg_indices", ["0"]), ("boxed_arg_indices", [2]),
                       ("is_wrapped", "yes")):
        doc = base_doc()
        doc["nodes"][3]["meta"][key] = value
        with pytest.raises(ExportError, match=f"at /nodes/3/meta/{key} \\(node 'mm'\\)"):
            import_graph(doc)


# ----------------------------------------------------------------------------- malformed


Mutation = Callable[[dict[str, Any]], Any]


def _set(path: str, value: Any) -> Mutation:
    """A mutation setting the value at a JSON pointer (creating the last key)."""
    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.strip("/").split("/")
        obj: Any = doc
        for p in parents:
            obj = obj[int(p)] if isinstance(obj, list) else obj[p]
        if isinstance(obj, list):
            obj[int(last)] = value
        else:
            obj[last] = value
    return apply


def _drop(path: str) -> Mutation:
    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.strip("/").split("/")
        obj: Any = doc
        for p in parents:
            obj = obj[int(p)] if isinstance(obj, list) else obj[p]
        del obj[int(last) if isinstance(obj, list) else last]
    return apply


def _nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


class Replace:
    """What a mutation returns to stand for the whole document."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _replace(value: Any) -> Mutation:
    return lambda doc: Replace(value)


def _val(node: int, value: Any) -> Mutation:
    return _set(f"/nodes/{node}/meta/val", value)


T = {"device": "cpu", "dtype": "float32", "shape": [3, 4], "stride": [4, 1]}
SUB = "/meta/subgraphs/true_graph_0"

# (category, mutation, the place the error must name). Each category is a kind of damage; the
# cases in it are its variants. A pointer ending in "(node" also requires the node to be named.
MALFORMED: list[tuple[str, Mutation, str]] = [
    # 1. the document itself
    ("document", _replace([]), "at /: expected a JSON object"),
    ("document", _replace("jointfx"), "at /: expected a JSON object"),
    ("document", _replace(None), "at /: expected a JSON object"),
    # 2. header keys
    ("header", _set("/extra", 1), "at /extra: unexpected header key 'extra'"),
    ("header", _drop("/format"), "at /format: not a jointfx graph"),
    ("header", _set("/format", 7), "at /format: not a jointfx graph"),
    ("header", _drop("/version"), "at /version: unsupported version"),
    ("header", _set("/version", "1"), "at /version: unsupported version '1'"),
    ("header", _set("/version", True), "at /version: unsupported version True"),
    ("header", _set("/version", 1.0), "at /version: unsupported version 1.0"),
    # 3. the node list
    ("nodes", _drop("/nodes"), "at /: missing key 'nodes'"),
    ("nodes", _set("/nodes", {}), "at /nodes: expected nodes to be an array, got an object"),
    ("nodes", _set("/nodes", []), "at /nodes: the graph has no output node"),
    ("nodes", lambda d: d["nodes"].pop(), "at /nodes: the graph has no output node"),
    ("nodes", lambda d: d["nodes"].append(copy.deepcopy(d["nodes"][2]) | {"name": "late"}),
     "at /nodes/20 (node 'late'): a node after the output node 'output'"),
    # 4. a node that is no object
    ("node type", _set("/nodes/2", 5), "at /nodes/2: expected a node object, got the integer 5"),
    ("node type", _set("/nodes/2", ["t"]), "at /nodes/2: expected a node object, got an array"),
    ("node type", _set("/nodes/2", None), "at /nodes/2: expected a node object, got null"),
    # 5. node keys
    ("node keys", _set("/nodes/2/users", []), "at /nodes/2/users (node 't'): unexpected key"),
    ("node keys", _drop("/nodes/2/name"), "at /nodes/2: missing key 'name'"),
    ("node keys", _drop("/nodes/2/op"), "at /nodes/2 (node 't'): missing key 'op'"),
    ("node keys", _drop("/nodes/2/target"), "at /nodes/2 (node 't'): missing key 'target'"),
    # 6. names
    ("name", _set("/nodes/2/name", 3), "at /nodes/2/name: expected the node's name (a string)"),
    ("name", _set("/nodes/2/name", ""), "at /nodes/2/name (node ''): node name '' is not"),
    ("name", _set("/nodes/2/name", "a b"), "at /nodes/2/name (node 'a b'): node name 'a b'"),
    ("name", _set("/nodes/2/name", "2t"), "at /nodes/2/name (node '2t'): node name '2t' is not"),
    ("name", _set("/nodes/2/name", "while"), "at /nodes/2/name (node 'while'): node name"),
    ("name", _set("/nodes/2/name", "t\u00e9"), "at /nodes/2/name (node 't\u00e9'): node name"),
    ("name", _set("/nodes/2/name", "x" * 499 + "-"), "(500 characters)"),
    ("duplicate name", _set("/nodes/2/name", "x_1"),
     "at /nodes/2/name (node 'x_1'): duplicate node name 'x_1'"),
    # 7. ops and targets
    ("op", _set("/nodes/2/op", "call_method"), "at /nodes/2/op (node 't'): unknown op kind"),
    ("op", _set("/nodes/2/op", None), "at /nodes/2/op (node 't'): expected the node's op"),
    ("target", _set("/nodes/2/target", ["aten.t"]), "at /nodes/2/target (node 't'): expected"),
    ("target", _set("/nodes/2/target", "aten.nope.default"),
     "at /nodes/2/target (node 't'): unknown target 'aten.nope.default'"),
    ("target", _set("/nodes/2/target", "builtins.getattr"),
     "at /nodes/2/target (node 't'): unknown target 'builtins.getattr'"),
    ("target", _set("/nodes/19/target", "return"),
     "at /nodes/19/target (node 'output'): the output node's target must be \"output\""),
    # 8. args and kwargs containers
    ("args", _set("/nodes/2/args", {"node": "w_1"}),
     "at /nodes/2/args (node 't'): expected args to be an array, got an object"),
    ("kwargs", _set("/nodes/2/kwargs", [1]),
     "at /nodes/2/kwargs (node 't'): expected kwargs to be an object, got an array"),
    ("kwargs", _set("/nodes/18/kwargs/dtype-x", 1),
     "at /nodes/18/kwargs/dtype-x (node '_to_copy'): kwargs key 'dtype-x' is not"),
    ("kwargs", _set("/nodes/18/kwargs/None", 1),
     "at /nodes/18/kwargs/None (node '_to_copy'): kwargs key 'None' is not"),
    ("no arguments", _set("/nodes/0/args", [1]), "at /nodes/0/args (node 'x_1'): a placeholder takes"),
    ("no arguments", _set("/nodes/4/kwargs", {"a": 1}),
     "at /nodes/4/kwargs (node '_tensor_constant0'): a get_attr takes no arguments"),
    ("output node", _set("/nodes/19/args", [[], []]),
     "at /nodes/19/args (node 'output'): the output node takes one argument"),
    ("output node", _set("/nodes/19/args", [{"node": "mm"}]),
     "at /nodes/19/args (node 'output'): the output node takes one argument"),
    # 9. node references
    ("reference", _set("/nodes/2/args/0", {"node": "nowhere"}),
     "at /nodes/2/args/0/node (node 't'): argument names unknown or later node 'nowhere'"),
    ("order", _set("/nodes/2/args/0", {"node": "mm"}),
     "at /nodes/2/args/0/node (node 't'): argument names unknown or later node 'mm'"),
    ("reference", _set("/nodes/2/args/0", {"node": 1}),
     "at /nodes/2/args/0/node (node 't'): expected a node name, got the integer 1"),
    ("reference", _set("/nodes/3/args/1", {"node": "t", "x": 1}),
     "at /nodes/3/args/1 (node 'mm'): expected an argument"),
    ("reference", _set("/nodes/3/args/1", {}),
     "at /nodes/3/args/1 (node 'mm'): expected an argument"),
    # 10. text that is not Unicode, or not ASCII where names must be
    ("unicode", _set("/nodes/7/args/1", "\udc80"),
     "at /nodes/7/args/1 (node 'split'): a string that is not valid Unicode"),
    ("unicode", _set("/nodes/18/kwargs/d\u00e9vice", 1),
     "at /nodes/18/kwargs/d\u00e9vice (node '_to_copy'): kwargs key 'd\u00e9vice' is not"),
    ("unicode", _set("/nodes/2/name", "t\ud800"), "at /nodes/2/name (node 't\\ud800'): node "),
    ("unicode", _set("/constants/0/device", "cpu\ud800"), "at /constants/0/device: bad device"),
    # 11. argument objects
    ("argument", _set("/nodes/3/args/1", {"slice": [1, 2]}),
     "at /nodes/3/args/1/slice (node 'mm'): unknown argument object key 'slice'"),
    ("argument", _set("/nodes/16/args/3", {"tuple": {"node": "x_1"}}),
     "at /nodes/16/args/3/tuple (node 'cond'): expected the tuple's items (an array)"),
    ("argument", _set("/nodes/16/args/3", {"tuple": [{"node": "nope"}]}),
     "at /nodes/16/args/3/tuple/0/node (node 'cond'): argument names unknown or later node"),
    ("argument", _set("/nodes/7/args/1", {"float": "NaN"}),
     "at /nodes/7/args/1/float (node 'split'): expected \"inf\", \"-inf\" or \"nan\""),
    ("argument", _set("/nodes/18/kwargs/dtype", {"dtype": "float128"}),
     "at /nodes/18/kwargs/dtype/dtype (node '_to_copy'): unknown dtype the string 'float128'"),
    ("argument", _set("/nodes/18/kwargs/dtype", {"dtype": "_dynamo"}),
     "at /nodes/18/kwargs/dtype/dtype (node '_to_copy'): unknown dtype"),
    ("argument", _set("/nodes/18/kwargs/dtype", {"dtype": 6}),
     "at /nodes/18/kwargs/dtype/dtype (node '_to_copy'): unknown dtype the integer 6"),
    ("argument", _set("/nodes/18/kwargs/device", {"device": "gpu:x"}),
     "at /nodes/18/kwargs/device/device (node '_to_copy'): bad device 'gpu:x'"),
    ("argument", _set("/nodes/18/kwargs/device", {"device": ["cpu"]}),
     "at /nodes/18/kwargs/device/device (node '_to_copy'): expected a device string"),
    ("argument", _set("/nodes/18/kwargs/layout", {"layout": "torch.nonsense"}),
     "at /nodes/18/kwargs/layout/layout (node '_to_copy'): unknown layout"),
    ("argument", _set("/nodes/18/kwargs/memory_format", {"memory_format": "os"}),
     "at /nodes/18/kwargs/memory_format/memory_format (node '_to_copy'): unknown memory"),
    ("argument", _set("/nodes/7/args/1", {"opaque": {"repr": "slice(1)"}}),
     "at /nodes/7/args/1/opaque (node 'split'): expected {\"repr\": \"...\", \"type\""),
    ("argument", _set("/nodes/7/args/1", {"opaque": {"repr": 1, "type": "slice"}}),
     "at /nodes/7/args/1/opaque (node 'split'): expected {\"repr\""),
    # 11. numbers in arguments
    # (an integer argument past int64 has a JSON form: the C++ reader refuses 2^63..2^64-1
    # and reads a longer one as a double; import_graph refuses both)
    ("integer", _set("/nodes/7/args/1", 1 << 63), "at /nodes/7/args/1 (node 'split'): integer"),
    ("integer", _set("/nodes/7/args/1", -(1 << 64)), "out of the int64 range"),
    ("number", _set("/nodes/7/args/1", math.nan),
     "at /nodes/7/args/1 (node 'split'): a non-finite number (nan) has no JSON form: the "
     "format writes it {\"float\": \"nan\"}"),
    ("number", _set("/nodes/7/args/1", -math.inf), "{\"float\": \"-inf\"}"),
    ("number", _set("/nodes/7/args/1", {"tuple": [math.inf]}),
     "at /nodes/7/args/1/tuple/0 (node 'split'): a non-finite number (inf)"),
    # 12. deep nesting
    ("nesting", _set("/nodes/7/args/1", _nested(300)),
     "(node 'split'): nesting deeper than 200 levels"),
    ("nesting", _set("/nodes/7/meta/extra", _nested(300)),
     "(node 'split'): nesting deeper than 200 levels"),
    ("nesting", _val(7, _nested(300, T)), "(node 'split'): nesting deeper than 200 levels"),
    ("nesting", _set("/meta/deep", _nested(300)), "nesting deeper than 200 levels"),
    # 13. placeholders
    ("placeholder", _set("/nodes/1/target", "x_1"),
     "at /nodes/1/target (node 'w_1'): placeholder target 'x_1' is another placeholder's"),
    ("placeholder", _set("/nodes/1/target", "w 1"),
     "at /nodes/1/target (node 'w_1'): placeholder target 'w 1' is not a Python identifier"),
    ("placeholder", _set("/nodes/1/target", "*args"),
     "at /nodes/1/target (node 'w_1'): placeholder target '*args' is not"),
    # 14. get_attr targets
    ("get_attr", _set("/nodes/4/target", "a..b"),
     "at /nodes/4/target (node '_tensor_constant0'): get_attr target 'a..b' is not an"),
    ("get_attr", _set("/nodes/4/target", "forward"),
     "at /nodes/4/target (node '_tensor_constant0'): get_attr target 'forward': 'forward' is an"
     " attribute every torch.nn.Module has"),
    ("get_attr", _set("/nodes/4/target", "training.x"),
     "at /nodes/4/target (node '_tensor_constant0'): get_attr target 'training.x': 'training' "
     "is an attribute of the module"),
    ("get_attr", _set("/nodes/4/target", "true_graph_0.x"),
     "at /nodes/14/target (node 'true_graph_0'): get_attr target 'true_graph_0': "
     "'true_graph_0' is already a module of other get_attr targets"),
    ("get_attr", lambda d: d["nodes"][15].update(target="true_graph_0.x"),
     "at /nodes/15/target (node 'false_graph_0'): get_attr target 'true_graph_0.x': "
     "'true_graph_0' is another get_attr's value"),
    # 15. node meta
    ("meta", _set("/nodes/2/meta", []), "at /nodes/2/meta (node 't'): expected meta to be an "),
    ("meta", _set("/nodes/2/meta/phase", "middle"),
     "at /nodes/2/meta/phase (node 't'): unknown phase the string 'middle'"),
    ("meta", _set("/nodes/2/meta/recompute", 6),
     "at /nodes/2/meta/recompute (node 't'): recompute must be 0..5"),
    ("meta", _set("/nodes/2/meta/recompute", True), "recompute must be 0..5"),
    ("meta", _set("/nodes/2/meta/seq_nr", 1.5),
     "at /nodes/2/meta/seq_nr (node 't'): expected the seq_nr (an integer), got the number 1.5"),
    ("meta", _set("/nodes/2/meta/ac_graph_id", "1"), "at /nodes/2/meta/ac_graph_id (node 't')"),
    ("meta", _set("/nodes/2/meta/stack_trace", ["File"]),
     "at /nodes/2/meta/stack_trace (node 't'): expected the stack trace (a string)"),
    ("meta", _set("/nodes/2/meta/custom", "layers.0"),
     "at /nodes/2/meta/custom (node 't'): expected an object"),
    ("meta", _set("/nodes/2/meta/custom", {"module_fqn": 0}),
     "at /nodes/2/meta/custom/module_fqn (node 't'): expected the module FQN"),
    ("meta", _set("/nodes/2/meta/other", {"x": [1, math.nan]}),
     "at /nodes/2/meta/other/x/1 (node 't'): a non-finite number"),
    ("meta", _set("/nodes/2/meta/other", {1: 2}),
     "at /nodes/2/meta/other (node 't'): an object key must be a string"),
    ("meta", _set("/nodes/2/meta/other", {"s": {1, 2}}),
     "at /nodes/2/meta/other/s (node 't'): expected JSON data, got a Python set"),
    ("meta", _set("/nodes/2/meta/other", "\ud800"),
     "at /nodes/2/meta/other (node 't'): a string that is not valid Unicode"),
    # 16. value meta
    ("val", _val(2, "f32"), "at /nodes/2/meta/val (node 't'): expected a value meta"),
    ("val", _val(2, {"shape": [4, 2]}), "at /nodes/2/meta/val (node 't'): missing key 'dtype'"),
    ("val", _val(2, {"dtype": "float32"}), "at /nodes/2/meta/val (node 't'): missing key 'shape'"),
    ("val", _val(2, T | {"layout": "strided"}),
     "at /nodes/2/meta/val/layout (node 't'): unexpected key 'layout' in a tensor meta"),
    ("val", _val(2, T | {"dtype": "f32"}), "at /nodes/2/meta/val/dtype (node 't'): unknown dtype"),
    ("val", _val(2, T | {"shape": "3x4"}),
     "at /nodes/2/meta/val/shape (node 't'): expected the shape (an array of integers)"),
    ("val", _val(2, T | {"shape": [3, 4.0]}),
     "at /nodes/2/meta/val/shape/1 (node 't'): expected an integer, got the number 4.0"),
    ("val", _val(2, T | {"shape": [-3, 4]}),
     "at /nodes/2/meta/val/shape (node 't'): dimension 0 of shape [-3, 4] is negative"),
    ("val", _val(2, T | {"shape": [1 << 62, 8], "stride": [8, 1]}),
     "at /nodes/2/meta/val/shape (node 't'): shape [4611686018427387904, 8]: the number of "
     "elements overflows int64"),
    ("val", _val(2, T | {"shape": [1 << 61], "stride": [1]}), "the size in bytes overflows int64"),
    ("val", _val(2, T | {"stride": [4]}),
     "at /nodes/2/meta/val/stride (node 't'): stride has 1 dimensions but shape has 2"),
    ("val", _val(2, T | {"stride": [4, -1]}), "stride 1 of [4, -1] is negative"),
    ("val", _val(2, T | {"shape": [2, 3], "stride": [1 << 62, 1]}),
     "the storage it spans overflows int64 bytes"),
    ("val", _val(2, T | {"device": "cuda:x"}), "at /nodes/2/meta/val/device (node 't'): bad "),
    ("val", _val(2, {"float": "infinity"}),
     "at /nodes/2/meta/val/float (node 't'): expected \"inf\", \"-inf\" or \"nan\""),
    ("val", _val(7, [T, T | {"dtype": None}]),
     "at /nodes/7/meta/val/1/dtype (node 'split'): unknown dtype null"),
    ("val", _val(2, math.inf), "at /nodes/2/meta/val (node 't'): a non-finite number (inf)"),
    # 17. process groups
    ("process_groups", _set("/process_groups", {}), "at /process_groups: expected an array"),
    ("process_groups", _set("/process_groups", [1]),
     "at /process_groups/0: expected a process group object"),
    ("process_groups", _set("/process_groups", [{"name": "0"}]),
     "at /process_groups/0: missing key 'size'"),
    ("process_groups", _set("/process_groups", [{"size": 2}]),
     "at /process_groups/0: missing key 'name'"),
    ("process_groups", _set("/process_groups", [{"name": "0", "size": "2"}]),
     "at /process_groups/0/size: expected the group size (an integer)"),
    ("process_groups", _set("/process_groups", [{"name": "0", "size": 2, "ranks": [0, "1"]}]),
     "at /process_groups/0/ranks/1: expected an integer"),
    ("process_groups", _set("/process_groups", [{"name": "0", "size": 1}] * 2),
     "at /process_groups/1/name: duplicate process group '0'"),
    ("process_groups", _set("/process_groups", [{"name": "0", "size": 1, "rank": 0}]),
     "at /process_groups/0/rank: unexpected key 'rank' in a process group"),
    # 18. inputs and outputs
    ("inputs", _set("/inputs", "all"), "at /inputs: expected an array of inputs"),
    ("inputs", _set("/inputs/0/name", "nobody"), "at /inputs/0/name: input 'nobody' names no "),
    ("inputs", _set("/inputs/0/name", "mm"), "at /inputs/0/name: input 'mm' names no placeholder"),
    ("inputs", _set("/inputs/0/kind", "weight"), "at /inputs/0/kind: unknown kind 'weight'"),
    ("inputs", _drop("/inputs/0/kind"), "at /inputs/0: missing key 'kind'"),
    ("inputs", _set("/inputs/0/fqn", 3), "at /inputs/0/fqn: expected the FQN (a string)"),
    ("outputs", _set("/outputs/0", ["loss"]), "at /outputs/0: expected an output object"),
    ("outputs", _set("/outputs/0/kind", "result"), "at /outputs/0/kind: unknown kind 'result'"),
    ("outputs", _set("/outputs/0/name", "a"), "at /outputs/0/name: unexpected key 'name'"),
    # 19. graph meta
    ("graph meta", _set("/meta", [1]), "at /meta: expected meta to be an object, got an array"),
    ("graph meta", _set("/meta/world", math.nan), "at /meta/world: a non-finite number (nan)"),
    ("graph meta", _set("/meta/nested", {"a": [{1: "x"}]}),
     "at /meta/nested/a/0: an object key must be a string, got the integer 1"),
    # 20. constants
    ("constants", _set("/constants", {}), "at /constants: expected an array of constants"),
    ("constants", _set("/constants/0", "00"), "at /constants/0: expected a constant object"),
    ("constants", _drop("/constants/0/data"), "at /constants/0: missing key 'data'"),
    ("constants", _set("/constants/0/data", "0000803F00000040"),
     "at /constants/0/data: expected lower-case hex digits (two per byte)"),
    ("constants", _set("/constants/0/data", "0000803f0000004"),
     "at /constants/0/data: expected lower-case hex digits"),
    ("constants", _set("/constants/0/data", "0000803f"),
     "at /constants/0/data: expected 8 bytes for float32 [2] (2 elements), got 4"),
    ("constants", _set("/constants/0/data", 1), "at /constants/0/data: expected lower-case hex"),
    ("constants", _set("/constants/0/dtype", "float64"),
     "at /constants/0/data: expected 16 bytes for float64 [2] (2 elements), got 8"),
    ("constants", _set("/constants/0/dtype", "floaty"), "at /constants/0/dtype: unknown dtype"),
    ("constants", _set("/constants/0/shape", [-2]),
     "at /constants/0/shape: dimension 0 of shape [-2] is negative"),
    ("constants", _set("/constants/0/shape", 2), "at /constants/0/shape: expected the shape"),
    ("constants", _set("/constants/0/name", "a b"),
     "at /constants/0/name: constant name 'a b' is not an attribute path"),
    ("constants", lambda d: d["constants"].append(d["constants"][0]),
     "at /constants/1/name: duplicate constant '_tensor_constant0'"),
    ("constants", _set("/constants/0/device", 0), "at /constants/0/device: expected a device"),
    ("constants", _set("/constants/0/bytes", "00"), "at /constants/0/bytes: unexpected key"),
    # 21. subgraphs
    ("subgraphs", _set("/meta/subgraphs", [1]),
     "at /meta/subgraphs: expected the subgraphs by get_attr target (an object)"),
    ("subgraphs", _set(SUB, "graph"), f"at {SUB}: expected a subgraph object, got the string"),
    ("subgraphs", _set(f"{SUB}/body", 1), f"at {SUB}/body: unexpected key 'body' in a subgraph"),
    ("subgraphs", _set(f"{SUB}/returns", "dict"),
     f"at {SUB}/returns: expected \"list\", \"tuple\" or \"value\""),
    ("subgraphs", lambda d: (d["meta"]["subgraphs"]["true_graph_0"].update(returns="value"),
                             d["meta"]["subgraphs"]["true_graph_0"]["nodes"][2]["args"][0]
                             .append({"node": "arg0_1"})),
     f"at {SUB}/returns: a subgraph that returns one value has 2 outputs"),
    ("subgraphs", _drop(f"{SUB}/nodes"), f"at {SUB}: missing key 'nodes'"),
    ("subgraphs", _set(f"{SUB}/nodes/1/target", "builtins.exec"),
     f"at {SUB}/nodes/1/target (node 'sin'): unknown target 'builtins.exec'"),
    ("subgraphs", _set(f"{SUB}/nodes/0/target", "a=1"),
     f"at {SUB}/nodes/0/target (node 'arg0_1'): placeholder target 'a=1' is not"),
    ("subgraphs", _set(f"{SUB}/subgraphs", []),
     f"at {SUB}/subgraphs: expected the subgraphs by get_attr target (an object)"),
    ("subgraphs", _set(f"{SUB}/constants", [{"name": "c"}]),
     f"at {SUB}/constants/0: missing key 'dtype'"),
    # 22. non-JSON Python values in a document built by hand
    ("python values", _set("/nodes/7/args/1", (1, 2)), "at /nodes/7/args/1 (node 'split'): expected an argument"),
    ("python values", _set("/nodes/7/args/1", b"\x00"), "got a Python bytes"),
    ("python values", _set("/nodes/7/args/1", 1j), "got a Python complex"),
]


def _case_id(case: tuple[str, Mutation, str]) -> str:
    return f"{case[0]}-{MALFORMED.index(case)}"


def test_the_malformed_documents_cover_every_category() -> None:
    categories = {c for c, _, _ in MALFORMED}
    assert len(categories) >= 27, sorted(categories)
    assert len(MALFORMED) >= 150


@pytest.mark.parametrize("case", MALFORMED, ids=_case_id)
def test_malformed_document_is_an_export_error_naming_the_place(
        case: tuple[str, Mutation, str]) -> None:
    _, mutate, where = case
    doc = base_doc()
    replaced = mutate(doc)
    if isinstance(replaced, Replace):
        doc = replaced.value
    with pytest.raises(ExportError) as info:
        import_graph(doc)
    message = str(info.value)
    assert where in message, message
    assert message.startswith("at /"), message
    assert len(message) < 1000, message


@pytest.mark.parametrize("case", [c for c in MALFORMED if c[0] in ("number", "graph meta",
                                                                   "python values")],
                         ids=_case_id)
def test_what_has_no_json_form_is_refused_before_the_pipeline(
        case: tuple[str, Mutation, str]) -> None:
    """run_pipeline_doc sends the document as JSON: what JSON cannot hold is an ExportError
    naming the place, never a null in its stead (orjson writes NaN as null)."""
    pytest.importorskip("jointfx._C")
    _, mutate, where = case
    doc = base_doc()
    mutate(doc)
    with pytest.raises((ExportError, jointfx.PipelineError)) as info:
        jointfx.run_pipeline_doc(doc, "dce")
    assert re.match(r"at /|.*error", str(info.value)), str(info.value)


# ----------------------------------------------------------------------------- defaults


@pytest.mark.parametrize("value", [2**64, -2**63 - 1, 10**30])
def test_an_argument_past_64_bits_is_refused_with_its_place_not_rounded(value: int) -> None:
    """Such an argument came back from run_pipeline_doc as the nearest double."""
    doc = json.loads((Path(__file__).resolve().parents[1] / "fuzz" / "corpus" / "json_reader"
                      / "golden_dce_placeholder_kept.json").read_text())
    doc["nodes"][2]["args"][1] = [4, value]
    doc["nodes"][3]["args"] = [[{"node": "view"}]]
    with pytest.raises(ValueError, match=r"at /nodes/2/args/1/1 \(node 'view'\): error: integer "
                                         + str(value) + " is out of the int64 range"):
        jointfx.run_pipeline_doc(doc, "dce")


def test_integers_of_any_size_in_meta_are_carried() -> None:
    """docs/graph-format.md "Node meta": a seq_nr or ac_graph_id the typed field cannot hold
    (autograd's 2^64-1, -2^63) and integers past 64 bits in other meta ride along verbatim."""
    doc = base_doc()
    meta = doc["nodes"][2]["meta"]
    meta.update({"seq_nr": 2**64 - 1, "ac_graph_id": -(2**63), "big": {"x": [-(2**80)]}})
    doc["meta"]["wide"] = 2**70
    gm = import_graph(doc)
    t = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.t.default)[0]
    assert (t.meta["seq_nr"], t.meta["ac_graph_id"], t.meta["big"]) == (
        2**64 - 1, -(2**63), {"x": [-(2**80)]})
    assert gm.meta["jointfx"]["meta"]["wide"] == 2**70
    assert json.loads(dumps_graph(doc)) == doc


def test_documented_defaults_are_honoured() -> None:
    """docs/graph-format.md: readers default a missing args/kwargs/meta to empty, a tensor meta's
    stride to contiguous and its device to none (cpu in PyTorch); the header keys but format,
    version and nodes are optional."""
    doc = base_doc()
    for key in ("process_groups", "inputs", "outputs", "constants"):
        doc.pop(key, None)
    for nd in doc["nodes"]:
        if nd["args"] == []:
            del nd["args"]
        if nd["kwargs"] == {}:
            del nd["kwargs"]
        val = nd["meta"].get("val")
        if isinstance(val, dict) and "shape" in val:
            del val["stride"], val["device"]
        if not nd["meta"]:
            del nd["meta"]
    gm = import_graph(doc)
    mm = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.mm.default)[0]
    assert mm.meta["val"].stride() == (2, 1) and mm.meta["val"].device == torch.device("cpu")
    t = gm.graph.find_nodes(op="call_function", target=torch.ops.aten.t.default)[0]
    assert t.meta["val"].stride() == (2, 1)  # contiguous, where the trace had [1, 4]
    x, w = torch.randn(3, 4), torch.randn(2, 4)
    got = gm(x, w)  # the constant is zeros now: the document no longer carries its value
    assert got[0].item() == 0 and torch.equal(got[1], _small_model(x, w)[1])


def test_what_opt_writes_from_a_jfx_imports(tmp_path: Path, jfx_bin: Path) -> None:
    """Every golden .jfx, written as JSON by `jointfx convert` and `jointfx opt`: tensors
    without a device (the text's default_device none) import, as the format allows."""
    written = 0
    no_device = 0
    for src in sorted((REPO / "tests" / "golden").rglob("*.jfx")):
        out = tmp_path / f"{src.parent.name}_{src.stem}.json"
        p = subprocess.run([jfx_bin, "convert", src, "-o", out], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        text = out.read_text()
        no_device += text.count('"shape"') - text.count('"device"')
        opt = tmp_path / f"{src.parent.name}_{src.stem}.opt.json"
        p = subprocess.run([jfx_bin, "opt", src, "-o", opt, "-p", "dce"], capture_output=True,
                           text=True, timeout=60)
        for doc in [out] + ([opt] if p.returncode == 0 else []):  # some fail verification
            try:
                import_graph(load_graph(doc))
                written += 1
            except ExportError as e:  # an op this torch does not have (dce/unknown_op_kept)
                assert "unknown target 'mylib." in str(e), str(e)
    assert written >= 50 and no_device > 0


def test_builtin_names_get_torch_fx_names(tmp_path: Path) -> None:
    """A node named after a Python builtin (what the C++ library names a new aten.sum node)
    imports under torch.fx's name for it; references still find it."""
    doc = base_doc()
    _rename(doc, "sum_1", "sum")
    _rename(doc, "t", "slice")
    gm = import_graph(doc)
    names = [n.name for n in gm.graph.nodes]
    assert "sum" not in names and "slice" not in names and "slice_1" in names
    x, w = torch.randn(3, 4), torch.randn(2, 4)
    assert torch.equal(gm(x, w)[0], _small_model(x, w)[0])


def _uses_fx_globals(x: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    """A graph whose generated code uses torch.fx's globals: `inf` (clamp's bounds), `nan`
    (full_like's value), `device` (zeros' kwarg), `torch` (every call)."""
    a = torch.clamp(x, -math.inf, math.inf)
    b = torch.nan_to_num(torch.full_like(x, math.nan))
    z = torch.zeros(x.shape[1], device="cpu")
    return [(a + b + z) @ w.t()]


def test_every_name_fx_code_uses_is_inert_as_a_placeholder_target_and_a_node_name() -> None:
    """A placeholder whose target was `inf` made `clamp(x, -inf, inf)` compute clamp(x, -x, x)
    (forward(self, inf) shadowed the constant); `torch` broke every call. Every name the
    generated code may refer to, as a placeholder's target and as a call node's name: the module
    computes what the document says, and export_graph gives the document back."""
    from jointfx.export import fx_code_names
    x, w = torch.randn(3, 4), torch.randn(2, 4)
    want = _uses_fx_globals(x, w)[0]
    doc = export_graph(make_fx(_uses_fx_globals)(x, w))
    assert [n["target"] for n in doc["nodes"][:3]] == ["x_1", "w_1", "aten.clamp.default"]
    names = sorted(fx_code_names() - frozenset(keyword.kwlist))  # keywords: refused (below)
    assert {"inf", "nan", "torch", "device", "sum", "getattr"} <= set(names)
    for name in names:
        for where in ("placeholder target", "node name"):
            d = copy.deepcopy(doc)
            if where == "placeholder target":
                d["nodes"][0]["target"] = name
            else:
                _rename(d, "clamp", name)
            gm = import_graph(d)
            got = gm(x, w)[0]
            assert torch.equal(got, want), f"{where} {name!r}: the module computes another thing"
            assert export_graph(gm) == d, f"{where} {name!r}: export does not give it back"


@pytest.mark.parametrize("args,kwargs,got", [
    ([{"node": "x_1"}], {}, "got 1"),                    # IndexError in torch.fx's codegen
    ([{"node": "x_1"}, 0, 5], {}, "got 3"),              # the 5 would be dropped silently
    ([{"node": "x_1"}, 0], {"b": 1}, "got 2 and kwargs"),  # so would the kwarg
])
def test_an_operator_with_the_wrong_operands_is_refused_with_its_place(
        args: list[Any], kwargs: dict[str, Any], got: str) -> None:
    doc = base_doc()
    doc["nodes"].insert(2, {"args": args, "kwargs": kwargs, "meta": {}, "name": "gi",
                            "op": "call_function", "target": "operator.getitem"})
    with pytest.raises(ExportError, match=r"at /nodes/2/args \(node 'gi'\): operator.getitem "
                                          r"takes 2 positional arguments and no kwargs, " + got):
        import_graph(doc)


@pytest.mark.parametrize("pipeline", [5, None, b"dce", ["dce"]])
def test_a_pipeline_that_is_not_text_is_a_type_error_that_says_so(pipeline: Any) -> None:
    """pybind's "incompatible constructor arguments" came out of run_pipeline before."""
    doc = base_doc()
    with pytest.raises(TypeError, match="expected the pipeline as a str"):
        jointfx.run_pipeline(import_graph(doc), pipeline)
    with pytest.raises(TypeError, match="expected the pipeline as a str"):
        jointfx.run_pipeline_doc(doc, pipeline)


@pytest.mark.parametrize(("pipeline", "said"), [
    ("configs/pipelines/default.json\0.txt", "holds a NUL byte at position 30"),
    ("dce\ud800", "is not valid text: surrogates not allowed at position 3"),
])
def test_a_pipeline_with_a_nul_or_a_lone_surrogate_is_a_value_error_that_says_so(
        pipeline: str, said: str) -> None:
    """A NUL inside a path truncated it in the extension (the file read was another one than
    named, and the message showed the truncated name); a lone surrogate came out as pybind's
    "incompatible function arguments" TypeError, as if the str were not one."""
    doc = base_doc()
    for run in (lambda: jointfx.run_pipeline(import_graph(doc), pipeline),
                lambda: jointfx.run_pipeline_doc(doc, pipeline)):
        with pytest.raises(ValueError, match=said):
            run()


def test_run_pipeline_of_something_else_than_a_graph_module_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="run_pipeline: expected a torch.fx.GraphModule, got dict"):
        jointfx.run_pipeline(base_doc(), "dce")


def test_a_keyword_as_a_placeholder_target_is_refused() -> None:
    doc = base_doc()
    doc["nodes"][0]["target"] = "lambda"
    with pytest.raises(ExportError, match="placeholder target 'lambda' is not a Python "
                                          "identifier"):
        import_graph(doc)


# ----------------------------------------------------------------------------- NaN


def _nan_graph() -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(2)
    a = g.call_function(torch.ops.aten.add.Scalar, (x, math.nan))
    b = g.call_function(torch.ops.aten.clamp.default, (a, -math.inf, math.inf))
    g.output([b])
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_nan_and_infinities_survive_every_path(tmp_path: Path) -> None:
    """Kept: export, canonical text, write_graph/load_graph, import, run_pipeline_doc and
    run_pipeline in place and not."""
    pytest.importorskip("jointfx._C")
    doc = export_graph(_nan_graph())
    assert doc["nodes"][1]["args"][1] == {"float": "nan"}
    assert doc["nodes"][2]["args"][1:] == [{"float": "-inf"}, {"float": "inf"}]
    write_graph(doc, tmp_path / "g.json")
    again = load_graph(tmp_path / "g.json")
    assert again == json.loads(dumps_graph(doc))
    out, _ = jointfx.run_pipeline_doc(again, "dce")
    assert out["nodes"][1]["args"][1] == {"float": "nan"}
    assert out["nodes"][2]["args"][1:] == [{"float": "-inf"}, {"float": "inf"}]
    for gm in (import_graph(out), jointfx.run_pipeline(_nan_graph(), "dce"),
               jointfx.run_pipeline(_nan_graph(), "dce", in_place=False)):
        add, clamp = [n for n in gm.graph.nodes if n.op == "call_function"]
        assert math.isnan(add.args[1]) and clamp.args[1:] == (-math.inf, math.inf)


def test_a_raw_nan_in_a_document_is_refused_not_nulled() -> None:
    """A float('nan') where the format writes {"float": "nan"} (a document built by hand, or
    read by a JSON reader that takes NaN): run_pipeline_doc gave back None in its place."""
    pytest.importorskip("jointfx._C")
    doc = export_graph(_nan_graph())
    doc["nodes"][1]["args"][1] = math.nan
    with pytest.raises(ExportError, match=r"at /nodes/1/args/1 \(node 'add_scalar'\): a "
                                          r"non-finite number \(nan\) has no JSON form"):
        jointfx.run_pipeline_doc(doc, "dce")
    with pytest.raises(ExportError, match=r"at /nodes/1/args/1 \(node 'add_scalar'\)"):
        import_graph(doc)
    doc["nodes"][1]["args"][1] = {"float": "nan"}
    doc["meta"] = {"scale": math.inf}
    with pytest.raises(ExportError, match=r"at /meta/scale: a non-finite number \(inf\)"):
        jointfx.run_pipeline_doc(doc, "dce")
    with pytest.raises(ExportError, match=r"at /meta/scale"):
        write_graph(doc, "/nonexistent/never.json")


# ----------------------------------------------------------------------------- load_graph


def test_load_graph_is_bounded_by_the_cli_input_limit(tmp_path: Path) -> None:
    from jointfx._files import DEFAULT_INPUT_LIMIT

    io_h = (REPO / "ir" / "io.h").read_text()
    assert "kDefaultInputLimitBytes = uint64_t{2} << 30" in io_h
    assert DEFAULT_INPUT_LIMIT == 2 << 30
    path = tmp_path / "g.json"
    write_graph(base_doc(), path)
    size = path.stat().st_size
    assert load_graph(path, max_input_bytes=size) == base_doc()
    with pytest.raises(ExportError, match=re.escape(f"{path}: error: the graph is larger than "
                                                    "the input limit of 0 MiB")):
        load_graph(path, max_input_bytes=size - 1)


def test_load_graph_of_dev_zero_fails_at_once() -> None:
    start = time.monotonic()
    with pytest.raises(ExportError, match=r"/dev/zero:1:1: error: JSON syntax error"):
        load_graph("/dev/zero")
    assert time.monotonic() - start < 5


def test_load_graph_never_reads_past_the_limit_of_a_stream(tmp_path: Path) -> None:
    """An endless pipe with no NUL byte: the read stops at limit + 1 bytes."""
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)
    written = [0]

    def feed() -> None:
        try:
            with open(fifo, "wb") as f:
                while True:
                    f.write(b" " * 65536)
                    written[0] += 65536
        except (BrokenPipeError, OSError):
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    with pytest.raises(ExportError, match="is larger than the input limit of 1 MiB"):
        load_graph(fifo, max_input_bytes=1 << 20)
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert written[0] < 4 << 20  # the pipe's buffer beyond what was read, not the whole stream


@pytest.mark.parametrize("content,where", [
    (b'{"format": "jointfx.graph",\n "version": \xff}', "g.json:2:13: error: invalid UTF-8 at "
                                                         "byte 40"),
    (b'{"a": NaN}', "g.json:1:7: error: NaN is not JSON"),
    (b'{"a": [1, -Infinity]}', "g.json:1:11: error: -Infinity is not JSON"),
    (b'{"a": 1, "b": {"c": 1, "c": 2}}', "g.json:1:24: error: key 'c' repeated in an object"),
    (b'{"a": 1,}', "g.json:1:9: error: JSON syntax error"),
    (b"[" * 100000, "g.json:1:201: error: nesting deeper than 200 levels"),
    (b"[1, 2]", "g.json: error: expected a JSON object at the top level, got an array"),
    (b'{"a": 1.5e3,\n "b": -' + b"7" * 5000 + b"}",
     "g.json:2:7: error: an integer of 5000 digits, more than Python converts"),
    (b"", "g.json:1:1: error: JSON syntax error"),
    (b'{"x": "\\u00e9\xc3\xa9"}\x00garbage', "g.json:1:17: error: JSON syntax error: Extra data "
                                             "(at byte 17)"),
])
def test_load_graph_errors_name_the_place(content: bytes, where: str, tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_bytes(content)
    with pytest.raises(ExportError) as info:
        load_graph(path)
    assert where in str(info.value).replace(str(tmp_path) + "/", "")


def test_a_nul_byte_after_a_json_document_is_a_located_error() -> None:
    """The C++ reader took "document, then NUL" for an internal error (nlohmann stops at the NUL
    and accepts what came before)."""
    from jointfx import _C
    doc = Path(__file__).resolve().parents[1] / "data" / "traced" / "fsdp_w2.json"
    text = doc.read_text()
    with pytest.raises(ValueError, match=r"<python>:\d+:1: error: JSON syntax error at byte "
                                         + str(len(text.encode())) + ": a NUL byte"):
        _C.verify_json(text + "\0")


def test_load_graph_refuses_a_directory_and_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"error: cannot read: Is a directory"):
        load_graph(tmp_path)
    with pytest.raises(ExportError, match=r"nope.json: error: cannot open the graph: No such"):
        load_graph(tmp_path / "nope.json")


# ----------------------------------------------------------------------------- write_graph


def _written(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_write_graph_replaces_a_regular_file_atomically_and_keeps_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    out.write_text("old")
    out.chmod(0o600)
    write_graph(base_doc(), out)
    assert _written(out) == base_doc()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["g.json"]
    fresh = tmp_path / "new.json"
    write_graph(base_doc(), fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644


def test_write_graph_through_a_symlink_writes_its_target_and_keeps_the_link(
        tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to("real.json")
    chain = tmp_path / "chain.json"
    chain.symlink_to(link)
    write_graph(base_doc(), chain)
    assert chain.is_symlink() and link.is_symlink()
    assert _written(target) == base_doc()
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to("made.json")
    write_graph(base_doc(), dangling)
    assert dangling.is_symlink() and _written(tmp_path / "made.json") == base_doc()


def test_a_link_planted_at_a_temporary_name_redirects_nothing(tmp_path: Path) -> None:
    """The old writer used `.NAME.tmp`: a link planted there made it overwrite the link's
    target. mkstemp's names are fresh and opened with O_EXCL."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for name in (".g.json.tmp", ".g.json.tmp.XXXXXX", "g.json.tmp", ".g.json.tmp.000000"):
        (tmp_path / name).symlink_to(victim)
    write_graph(base_doc(), tmp_path / "g.json")
    assert victim.read_text() == "precious"
    assert _written(tmp_path / "g.json") == base_doc()
    assert not (tmp_path / "g.json").is_symlink()
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith(".g.json.tmp.") and
                 not (tmp_path / n).is_symlink()]
    assert leftovers == []


def test_write_graph_writes_a_fifo_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_graph(base_doc(), fifo)
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(got[0]) == base_doc()


def test_write_graph_writes_a_character_device_in_place(tmp_path: Path) -> None:
    if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
        pytest.skip("/dev/null is not a character device here")
    link = tmp_path / "null.json"
    link.symlink_to("/dev/null")
    write_graph(base_doc(), link)
    write_graph(base_doc(), "/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and link.is_symlink()


def test_write_graph_to_a_descriptor_writes_that_descriptor(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        write_graph(base_doc(), f"/dev/fd/{w}")
        os.close(w)
        w = -1
        with os.fdopen(r, "rb") as f:
            r = -1
            assert json.loads(f.read()) == base_doc()
    finally:
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)


def test_write_graph_refuses_a_socket_and_a_directory(tmp_path: Path) -> None:
    sock_path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
        with pytest.raises(ExportError, match=r"s.json: error: refusing to write to a socket "
                                              r"\(outputs go to regular files, character "
                                              r"devices or FIFOs\)"):
            write_graph(base_doc(), sock_path)
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    finally:
        sock.close()
    (tmp_path / "d.json").mkdir()
    with pytest.raises(ExportError, match=r"d.json: error: cannot write: Is a directory"):
        write_graph(base_doc(), tmp_path / "d.json")
    with pytest.raises(ExportError, match=r"error: empty output path"):
        write_graph(base_doc(), "")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "g.json"
    out.write_text("old")
    doc = base_doc()
    doc["nodes"][2]["meta"]["bad"] = math.nan
    with pytest.raises(ExportError, match=r"at /nodes/2/meta/bad \(node 't'\)"):
        write_graph(doc, out)
    doc = base_doc()
    doc["nodes"][2]["meta"]["bad"] = "\udc80"
    with pytest.raises(ExportError, match=r"at /nodes/2/meta/bad \(node 't'\): a string that is "
                                          "not valid Unicode"):
        write_graph(doc, out)
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["g.json"]
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "g.json").write_text("old")
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        with pytest.raises(ExportError, match=r"g.json: error: cannot create a temporary file"):
            write_graph(base_doc(), ro / "g.json")
        assert (ro / "g.json").read_text() == "old"
    finally:
        ro.chmod(0o700)


def test_a_fifo_nobody_writes_to_is_an_error_not_a_wait(tmp_path: Path, monkeypatch) -> None:
    """load_graph of a FIFO that nobody writes to: an ExportError naming it after a bounded wait
    (opening it waited for a writer forever, as the CLI did: tests/bad_inputs.py
    check_fifo_inputs); one written to a moment later is read as a file."""
    import threading
    import time

    import jointfx
    from jointfx import _files

    monkeypatch.setattr(_files, "FIFO_WRITER_WAIT_S", 0.2)
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    with pytest.raises(jointfx.ExportError, match="a FIFO nobody wrote to in 0.2 s"):
        jointfx.load_graph(fifo)
    monkeypatch.setattr(_files, "FIFO_WRITER_WAIT_S", 30)
    text = (REPO / "tests" / "data" / "traced" / "fsdp_w1.json").read_text()

    def write() -> None:
        time.sleep(0.5)
        fifo.write_text(text)

    writer = threading.Thread(target=write)
    writer.start()
    doc = jointfx.load_graph(fifo)
    writer.join()
    assert doc == json.loads(text)
