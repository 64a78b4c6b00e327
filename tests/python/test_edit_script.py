"""run_pipeline's edit script of Python objects (EditScript + apply_script) edits the caller's graph
exactly as the JSON edit script (run_pipeline_edits + apply_edits, the reference form) does.

On every traced fixture and on synthetic Llama-3 graphs, for the identity pipeline, `tag-fsdp,remat`,
block bucketing with split groups and scheduling, and configs/pipelines/default.json, both forms
give the same nodes in the same order with the same names, ops, targets, args and kwargs (node
references by name, containers by type), the same users, the same meta keys in the same order with
the same values (val by shape, stride, dtype, device and type; FX-only meta by value), the same
header and the same edit counts. Besides: remat's recomputed nodes share their source's FakeTensor,
every other new value is a FakeTensor of its own, and an opaque argument of a changed node keeps
the caller's object.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor

from conftest import REPO, all_traced_fixture_paths
from jointfx.export import dumps_graph, export_text, import_graph, load_graph

if os.environ.get("CI") != "true":
    pytest.importorskip("jointfx._C", reason="jointfx._C not built (scripts/build builds it)")

import jointfx._C as ext  # noqa: E402

from jointfx.passes import apply_edits, apply_script, run_pipeline  # noqa: E402

PIPELINES = {
    "identity": "",
    "remat": "tag-fsdp,remat",
    "bucket": "bucket{plan=blocks,kinds=ag,rs,ar},split-comm-groups,schedule{prefetch=1}",
    "default": str(REPO / "configs" / "pipelines" / "default.json"),
}
FIXTURES = all_traced_fixture_paths()


def _arg(a: object) -> object:
    if isinstance(a, fx.Node):
        return ("node", a.name)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__, tuple(_arg(x) for x in a))
    if isinstance(a, dict):
        return (type(a).__name__, tuple((k, _arg(v)) for k, v in a.items()))
    return (type(a).__name__, repr(a))


def _val(v: object) -> object:
    if isinstance(v, torch.Tensor):
        return ("tensor", type(v).__name__, tuple(v.shape), v.stride(), v.dtype, v.device)
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_val(x) for x in v))
    return (type(v).__name__, repr(v))


def _describe(gm: fx.GraphModule) -> tuple[list, dict]:
    nodes = []
    for n in gm.graph.nodes:
        meta = [(k, _val(v) if k == "val" else repr(v)) for k, v in n.meta.items()]
        nodes.append((n.name, n.op, str(n.target), _arg(n.args), _arg(n.kwargs), meta,
                      [u.name for u in n.users]))
    return nodes, gm.meta["jointfx"]


def _prepared(doc: dict) -> fx.GraphModule:
    """The imported graph plus FX-only meta the format does not carry, which new nodes inherit."""
    gm = import_graph(doc)
    for n in gm.graph.nodes:
        n.meta["nn_module_stack"] = {"L__self__": ("model", "torch.nn.Module")}
        n.meta["stack_trace"] = f"File 'model.py', line 1, in {n.name}"
        n.meta["seq_nr"] = n.meta.get("seq_nr", 7)
    return gm


def _both(doc: dict, pipeline: str) -> tuple[fx.GraphModule, dict, fx.GraphModule, dict]:
    ref = _prepared(doc)
    exported = export_text(ref, extension=ext)
    script, erased, header, _ = ext.run_pipeline_edits(exported.text, pipeline, True, False)
    ref_counts = apply_edits(ref, exported.node_meta, script, erased, header)
    got = _prepared(doc)
    exported = export_text(got, extension=ext)
    got_counts = apply_script(got, exported.node_meta,
                              ext.EditScript(exported.text, pipeline, True, False), lint=True)
    return ref, ref_counts, got, got_counts


def _check_same(doc: dict, pipeline: str) -> None:
    ref, ref_counts, got, got_counts = _both(doc, pipeline)
    assert got_counts == ref_counts
    want_nodes, want_header = _describe(ref)
    got_nodes, got_header = _describe(got)
    assert got_header == want_header
    assert [n[0] for n in got_nodes] == [n[0] for n in want_nodes]
    for w, g in zip(want_nodes, got_nodes):
        assert g == w, w[0]
    # Values: shared only between a recomputed node and its source; all in the graph's mode.
    vals: dict[int, list[str]] = {}
    for n in got.graph.nodes:
        v = n.meta.get("val")
        for t in v if isinstance(v, (list, tuple)) else (v,):
            if isinstance(t, FakeTensor):
                vals.setdefault(id(t), []).append(n.name)
    for names in vals.values():
        assert len(names) == 1 or all(m.endswith("_recomputed") for m in names[1:]), names
    if pipeline == "":
        assert got_counts["new"] == got_counts["changed"] == got_counts["moved"] == 0


@pytest.mark.parametrize("pipeline", PIPELINES.values(), ids=PIPELINES.keys())
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_edit_script_matches_json_script_on_fixtures(path: Path, pipeline: str) -> None:
    _check_same(load_graph(path), pipeline)


def _synth(jfx_bin: Path, tmp_path: Path, *flags: str) -> dict:
    out = tmp_path / "llama.json"
    subprocess.run([str(jfx_bin), "synth", "--preset", "llama3-8b", *flags, "-o", str(out)],
                   check=True, capture_output=True)
    return load_graph(out)


@pytest.mark.parametrize("pipeline", PIPELINES.values(), ids=PIPELINES.keys())
def test_edit_script_matches_json_script_on_synthetic_llama(jfx_bin, tmp_path, pipeline) -> None:
    _check_same(_synth(jfx_bin, tmp_path, "--layers", "3"), pipeline)


@pytest.mark.slow
def test_edit_script_matches_json_script_on_llama3_8b(jfx_bin, tmp_path) -> None:
    doc = _synth(jfx_bin, tmp_path)
    for pipeline in PIPELINES.values():
        _check_same(doc, pipeline)


def test_recomputed_nodes_share_their_source_value(jfx_bin, tmp_path) -> None:
    gm = import_graph(_synth(jfx_bin, tmp_path, "--layers", "2"))
    by_name = {n.name: n for n in gm.graph.nodes}
    run_pipeline(gm, PIPELINES["remat"])
    clones = [n for n in gm.graph.nodes if n.name.endswith("_recomputed")]
    assert clones
    for n in clones:
        src = by_name[n.name.removesuffix("_recomputed")]
        assert n.meta["val"] is src.meta["val"], n.name


def test_opaque_argument_of_changed_node_stays_the_callers_value() -> None:
    """An argument the format carries as an opaque repr (here a slice) comes back as the caller's
    value, not an Opaque stand-in, on a node whose args the pipeline changes (remat rewires t_49 to
    a recomputed weight)."""
    doc = load_graph(REPO / "tests" / "data" / "traced" / "fsdp_w2.json")
    gm = import_graph(doc)
    node = next(n for n in gm.graph.nodes if n.name == "t_49")
    node.kwargs = {**node.kwargs, "probe": slice(1, None, 2)}
    before = node.args
    run_pipeline(gm, PIPELINES["remat"])
    assert node.args != before  # changed by the pipeline
    assert node.kwargs["probe"] == slice(1, None, 2)


def test_changed_nodes_are_those_whose_json_changed_after_bucket_goes_back_to_its_copy() -> None:
    """bucket over its memory bound goes back to an exact copy of the graph (same ids, new node
    storage): nodes are compared by id, so exactly the input nodes whose args, kwargs or meta
    changed are reported changed (comparing node pointers saw almost every node as changed, and
    could see a rewired one as unchanged where new storage reused an old address)."""
    doc = load_graph(REPO / "tests" / "data" / "traced" / "uneven_w4.json")
    text = dumps_graph(doc)
    out, _ = ext.run_pipeline_json(text, PIPELINES["bucket"], True, False)
    after = {n["name"]: n for n in json.loads(out)["nodes"]}
    differ = sum(1 for n in doc["nodes"] if n["name"] in after and after[n["name"]] != n)
    counts = ext.EditScript(text, PIPELINES["bucket"], True, False).counts
    assert counts["changed"] == differ
    assert counts["kept"] + counts["changed"] + counts["erased"] == len(doc["nodes"])


def test_create_node_hooks_see_new_nodes_with_their_arguments() -> None:
    """With a create-node hook (torch.export's metadata hook computes meta from the arguments)
    new nodes are made with their arguments, and the graph is the same as without the hook."""
    doc = load_graph(REPO / "tests" / "data" / "traced" / "fsdp_w2.json")
    plain = import_graph(doc)
    run_pipeline(plain, PIPELINES["default"])
    hooked = import_graph(doc)
    seen: list[tuple[str, int]] = []
    hooked._register_create_node_hook(lambda n: seen.append((n.name, len(n.all_input_nodes))))
    run_pipeline(hooked, PIPELINES["default"])
    assert _describe(hooked) == _describe(plain)
    new = {n.name for n in hooked.graph.nodes} - {n["name"] for n in doc["nodes"]}
    assert {name for name, _ in seen} == new
    assert all(inputs > 0 for _, inputs in seen)


def test_a_new_recompute_tag_alone_is_the_short_op() -> None:
    """tag-fsdp's edit on most nodes it changes is a new recompute tag and nothing else: the
    script says it as (4, slot, moved, tag), and applying it sets exactly meta['recompute'] (the
    graph is the JSON script's, as the fixture tests check for every pipeline)."""
    doc = load_graph(REPO / "tests" / "data" / "traced" / "fsdp_w2.json")
    text = dumps_graph(doc)
    script = ext.EditScript(text, "tag-fsdp", True, False)
    short = [op for op in script.ops if op[0] == 4]
    assert short and all(len(op) == 4 and op[3] in (0, 1, 2, 3) for op in short)
    assert not [op for op in script.ops if op[0] == 2 and op[4] is not None
                and set(op[4]) == {"recompute"} and op[3] < 0 and op[5] is None]
    gm = import_graph(doc)
    before = {n.name: dict(n.meta) for n in gm.graph.nodes}
    slots = list(gm.graph.nodes)
    apply_script(gm, export_text(gm, extension=ext).node_meta,
                 ext.EditScript(text, "tag-fsdp", True, False), lint=True)
    for op in short:
        node = slots[op[1]]
        changed = {k for k in node.meta if node.meta[k] is not before[node.name].get(k)}
        assert changed == {"recompute"}, node.name
        assert node.meta["recompute"].value == op[3]


def test_expensive_checks_change_nothing_but_the_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process the unchanged-graph hash and the IR bookkeeping check run only with
    JOINTFX_EXPENSIVE_CHECKS=1 (the tests set it); the graph comes out the same either way."""
    doc = load_graph(REPO / "tests" / "data" / "traced" / "fsdp_w2.json")
    graphs, hashes = [], []
    for on in ("1", "0"):
        monkeypatch.setenv("JOINTFX_EXPENSIVE_CHECKS", on)
        gm = import_graph(doc)
        run_pipeline(gm, PIPELINES["default"])
        graphs.append(_describe(gm))
        hashes.append(gm.meta["jointfx_report"]["hash_seconds"])
    assert graphs[0] == graphs[1]
    assert hashes[0] > 0 and hashes[1] == 0
