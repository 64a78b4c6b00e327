"""Node meta that jointfx does not interpret comes back from the C++ core unchanged.

torchtitan's chunked loss leaves seq_nr = 2^64-1 (autograd's "no sequence number") on backward
nodes, which the C++ reader refused ("integer 18446744073709551615 is out of the int64 range");
any other plain-JSON meta rides along verbatim, whatever its integers' size.
"""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
import torch
import torch.fx as fx

import jointfx

ODD_META = {
    "seq_nr": 2**64 - 1,
    "ac_graph_id": -(2**63),
    "big": 2**70,
    "neg_big": -(2**65),
    "just_past_int64": 2**63,
    "nested": {"a": [1, 2**64 + 5, "s", None], "t": 1.5, "deep": {"x": [[-(2**80)]]}},
    "flag": True,
    "text": "é∑🚀 \"quoted\" \\ back",
}


def _graph() -> fx.GraphModule:
    g = fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.ops.aten.relu.default, (x,))
    g.output(g.call_function(torch.ops.aten.neg.default, (y,)))
    gm = fx.GraphModule(torch.nn.Module(), g)
    for n in gm.graph.nodes:
        if n.op == "call_function":
            n.meta.update(copy.deepcopy(ODD_META))
    return gm


def _odd(gm: fx.GraphModule) -> list[dict]:
    return [{k: n.meta.get(k) for k in ODD_META} for n in gm.graph.nodes
            if n.op == "call_function"]


@pytest.mark.parametrize("in_place", [False, True])
def test_odd_meta_round_trips_through_a_pipeline(in_place: bool) -> None:
    gm = _graph()
    out = jointfx.run_pipeline(gm, "dce", in_place=in_place)
    assert _odd(out) == [ODD_META, ODD_META]


def test_odd_meta_round_trips_through_the_document() -> None:
    doc = jointfx.export_graph(_graph())
    new_doc, _ = jointfx.run_pipeline_doc(doc, "dce")
    metas = [n["meta"] for n in new_doc["nodes"] if n["op"] == "call_function"]
    for m in metas:
        assert {k: m.get(k) for k in ODD_META} == ODD_META
    back = jointfx.import_graph(new_doc)
    assert _odd(back) == [ODD_META, ODD_META]


def test_odd_meta_round_trips_through_the_text_format(jfx_bin, tmp_path) -> None:
    src = tmp_path / "g.json"
    jointfx.write_graph(jointfx.export_graph(_graph()), src)
    text = tmp_path / "g.jfx"
    again = tmp_path / "again.json"
    for a, b in ((src, text), (text, again)):
        r = subprocess.run([str(jfx_bin), "convert", str(a), "-o", str(b)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    assert "18446744073709551615" in text.read_text()
    assert json.loads(again.read_text()) == json.loads(src.read_text())


def _policy_graph() -> fx.GraphModule:
    """One node per CheckpointPolicy value torch defines (read from torch, not listed here)."""
    from torch.utils.checkpoint import CheckpointPolicy

    g = fx.Graph()
    x = g.placeholder("x")
    for p in CheckpointPolicy:
        x = g.call_function(torch.ops.aten.relu.default, (x,))
        x.meta["recompute"] = p
    g.output(x)
    return fx.GraphModule(torch.nn.Module(), g)


def _policies(gm: fx.GraphModule) -> list:
    return [n.meta.get("recompute") for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("in_place", [False, True])
def test_every_checkpoint_policy_round_trips(in_place: bool, jfx_bin, tmp_path) -> None:
    """MUST_CPU_OFFLOAD (GraphTrainer's sac_and_offload) stopped every pipeline: "recompute
    must be 0..3". Every value torch defines now survives a pipeline that tags and realizes
    recompute (in process and through the document), the text format and the CLI."""
    from torch.utils.checkpoint import CheckpointPolicy

    want = list(CheckpointPolicy)
    assert len(want) >= 6  # MUST_CPU_OFFLOAD and PREFER_CPU_OFFLOAD included
    out = jointfx.run_pipeline(_policy_graph(), "dce,tag-fsdp,remat", in_place=in_place)
    assert _policies(out) == want
    doc = jointfx.export_graph(_policy_graph())
    assert [n["meta"]["recompute"] for n in doc["nodes"] if n["op"] == "call_function"] == [
        p.value for p in want]
    new_doc, _ = jointfx.run_pipeline_doc(doc, "dce,remat")
    assert _policies(jointfx.import_graph(new_doc)) == want
    src, text, again = tmp_path / "g.json", tmp_path / "g.jfx", tmp_path / "again.json"
    jointfx.write_graph(doc, src)
    for a, b in ((src, text), (text, again)):
        r = subprocess.run([str(jfx_bin), "convert", str(a), "-o", str(b)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    for p in want:
        assert f"recompute={p.name}" in text.read_text()
    assert json.loads(again.read_text()) == json.loads(src.read_text())
