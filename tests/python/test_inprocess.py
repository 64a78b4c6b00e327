"""The in-process bridge: torch.fx -> C++ pass manager (jointfx._C) -> torch.fx, no files.

For every traced fixture the empty pipeline and `dce` keep nodes, targets, args and meta; the
GraphTrainer-style pass callable works; C++ errors arrive as Python exceptions carrying the C++
message; and on real tensors (gloo world of one) the graph that went through C++ computes the
same bits as the original.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from conftest import fixture_variant, traced_fixture_paths
from jointfx.export import dumps_graph, export_graph, import_graph, load_graph
from jointfx.trace import VARIANTS, real_inputs, trace_joint, variant_config

if os.environ.get("CI") != "true":  # in CI the extension is built: a missing one must fail
    pytest.importorskip("jointfx._C", reason="jointfx._C not built (scripts/build builds it)")

from jointfx.passes import PipelineError, graph_pass, pass_names, run_pipeline  # noqa: E402

FIXTURES = traced_fixture_paths()


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_empty_pipeline_round_trips_exactly(path) -> None:
    doc = load_graph(path)
    gm = import_graph(doc)
    out = run_pipeline(gm, "", verify=False)
    assert dumps_graph(export_graph(out)) == dumps_graph(doc)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_dce_keeps_nodes_targets_args_and_meta(path) -> None:
    doc = load_graph(path)
    gm = import_graph(doc)
    out = run_pipeline(gm, "dce")
    after = {n["name"]: n for n in export_graph(out)["nodes"]}
    before = {n["name"]: n for n in doc["nodes"]}
    assert set(after) <= set(before)
    for name, node in after.items():
        assert node == before[name], name
    report = out.meta["jointfx_report"]
    assert [p["name"] for p in report["passes"]] == ["dce"]
    removed = report["passes"][0]["stats"].get("dce.nodes-removed", report["passes"][0]["stats"].get("nodes-removed", 0))
    assert len(before) - len(after) == removed


def test_report_splits_the_call_into_export_cxx_and_apply() -> None:
    import time

    gm = import_graph(load_graph(FIXTURES[0]))
    start = time.perf_counter()
    report = run_pipeline(gm, "tag-fsdp,remat").meta["jointfx_report"]
    wall = time.perf_counter() - start
    parts = report["boundary_seconds"]
    assert set(parts) == {"export", "cxx", "apply"}
    assert all(v > 0 for v in parts.values())
    assert sum(parts.values()) <= wall
    # The C++ call contains the pipeline it reports.
    assert parts["cxx"] >= report["total_seconds"]
    assert all(p["cpu_seconds"] >= 0 for p in report["passes"])


def test_lint_runs_without_verify_or_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C++ verifier checks the graph an edit script reproduces, so FX's lint runs only with
    verify=False, or with JOINTFX_LINT_EDITS=1 (read at each call)."""
    calls: list[int] = []
    lint = torch.fx.Graph.lint
    monkeypatch.setattr(torch.fx.Graph, "lint", lambda self: calls.append(1) or lint(self))

    def lints(**kwargs: object) -> int:
        gm = import_graph(load_graph(FIXTURES[0]))
        calls.clear()
        run_pipeline(gm, "dce", **kwargs)
        return len(calls)

    assert lints() == 0
    assert lints(verify=False) == 1
    monkeypatch.setenv("JOINTFX_LINT_EDITS", "1")
    assert lints() == 1


def test_graph_pass_has_graph_trainer_signature() -> None:
    doc = load_graph(FIXTURES[0])
    gm = import_graph(doc)
    p = graph_pass("dce")
    out = p(gm, example_inputs=None)
    assert isinstance(out, torch.fx.GraphModule)
    assert "dce" in pass_names()


def test_cpp_errors_carry_the_cpp_message() -> None:
    gm = import_graph(load_graph(FIXTURES[0]))
    with pytest.raises(PipelineError, match="no-such-pass"):
        run_pipeline(gm, "dce,no-such-pass")
    with pytest.raises(PipelineError, match="unknown-key"):
        run_pipeline(gm, "dce{unknown-key=1}")


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "sac"])
def test_graph_through_cpp_computes_the_same_bits(variant: str, gloo_world1: None) -> None:
    traced = trace_joint(variant_config(variant, world_size=1))
    inputs = real_inputs(traced, seed=0)
    doc = json.loads(dumps_graph(traced.export()))
    out = run_pipeline(import_graph(doc), "dce")
    with torch.no_grad():
        want = list(traced.gm(*inputs))
        got = list(out(*inputs))
    assert len(want) == len(got)
    for i, (a, b) in enumerate(zip(want, got)):
        assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)), i
