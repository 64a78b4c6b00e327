"""run_pipeline is loud, not silent: findings on graphs the FSDP passes did not understand warn,
once each, saying which passes changed the graph (or raise with strict=True), and the report
goes to the "jointfx" logger (TORCH_LOGS=jointfx) and to torch's structured trace (what tlparse
reads). JointfxPass runs a pipeline as a torch.fx PassBase."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.fx as fx

from conftest import REPO, TRACED_DIR
from jointfx import (
    InputSpec,
    JointfxPass,
    JointfxWarning,
    OutputSpec,
    StrictCheckError,
    import_graph,
    load_graph,
    run_pipeline,
)


def _fixture() -> tuple[dict, fx.GraphModule]:
    doc = load_graph(TRACED_DIR / "fsdp_w2.json")
    return doc, import_graph(doc)


def test_understood_graph_is_quiet_and_reports(caplog: pytest.LogCaptureFixture) -> None:
    _, gm = _fixture()
    with warnings.catch_warnings():
        warnings.simplefilter("error", JointfxWarning)
        with caplog.at_level(logging.INFO, logger="jointfx"):
            new = run_pipeline(gm, "tag-fsdp{reshard=always},remat", strict=True)
    report = new.meta["jointfx_report"]
    assert report["findings"] == []
    assert report["pipeline"] == "tag-fsdp{reshard=always},remat"
    tag = report["passes"][0]
    assert tag["name"] == "tag-fsdp" and tag["stats"]["chains-resharded"] > 0
    assert all(p["seconds"] > 0 for p in report["passes"])  # timings are on
    text = caplog.text
    assert "jointfx pipeline 'tag-fsdp{reshard=always},remat': 2 passes" in text
    assert f"chains-resharded={tag['stats']['chains-resharded']}" in text


def test_missing_parameter_specs_warn_and_strict_raises() -> None:
    doc, gm = _fixture()
    no_specs = [InputSpec("user_input")] * len(doc["inputs"])
    with pytest.warns(JointfxWarning, match=r"\d+ graph inputs, none marked as a parameter"):
        run_pipeline(gm, "tag-fsdp,remat", inputs=no_specs)
    with pytest.raises(StrictCheckError, match="none marked as a parameter"):
        run_pipeline(gm, "tag-fsdp,remat", inputs=no_specs, strict=True)


def test_parameters_without_fsdp_chain_warn() -> None:
    """A graph with a parameter but no all-gather (plain data parallel, or an FSDP flavour the
    analysis does not know): tag-fsdp finds nothing and says so, with what it expected."""

    def step(w: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
        loss = (x @ w).sum()
        return [loss, x.t() @ torch.ones_like(x @ w)]

    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(step)(torch.randn(4, 4), torch.randn(2, 4))
    with pytest.warns(JointfxWarning, match=r"tag-fsdp found no FSDP unshard chain \(expected one "
                                            r"all-gather chain per sharded parameter, 1 param"):
        new = run_pipeline(gm, "tag-fsdp", inputs=[InputSpec("parameter", "w"),
                                                   InputSpec("user_input")],
                           outputs=[OutputSpec("loss"), OutputSpec("gradient", "w")])
    assert len(new.meta["jointfx_report"]["findings"]) == 1


def test_report_reaches_torch_structured_trace() -> None:
    """trace_structured writes to the "torch.__trace" logger when TORCH_TRACE is set; a handler
    on it sees the jointfx_pipeline artifact as tlparse would."""
    from torch._logging._internal import trace_log

    records: list[logging.LogRecord] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Grab(level=logging.DEBUG)
    trace_log.addHandler(handler)
    try:
        _, gm = _fixture()
        run_pipeline(gm, "dce,tag-fsdp")
    finally:
        trace_log.removeHandler(handler)
    ours = [r for r in records
            if getattr(r, "metadata", {}).get("artifact", {}).get("name") == "jointfx_pipeline"]
    assert ours, [getattr(r, "metadata", None) for r in records]
    payload = json.loads(ours[0].payload)  # type: ignore[attr-defined]
    assert [p["name"] for p in payload["passes"]] == ["dce", "tag-fsdp"]


def _ddp_step_graph() -> tuple[fx.GraphModule, dict]:
    """A step with two parameters whose gradients come from all-reduced values through a
    matmul (no data-parallel reduction a pass knows: a plain DDP all-reduce -> wait -> gradient
    is one, and gives no finding) and a dead op: dce removes it, tag-fsdp finds no chain and two
    collectives it does not understand, bucket{kinds=ag,rs} no bucket."""
    from torch.fx.experimental.proxy_tensor import make_fx

    c10d = torch.ops._c10d_functional

    def step(w1: torch.Tensor, w2: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
        _unused = x * 2
        loss = (x @ w1 @ w2).sum()
        g1 = c10d.wait_tensor(c10d.all_reduce(torch.ones_like(w1), "sum", "dp")) @ w1
        g2 = c10d.wait_tensor(c10d.all_reduce(torch.ones_like(w2), "sum", "dp")) @ w2
        return [loss, g1, g2]

    gm = make_fx(step, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4),
                                            torch.randn(2, 4))
    header = {"inputs": [InputSpec("parameter", "w1"), InputSpec("parameter", "w2"),
                         InputSpec("user_input")],
              "outputs": [OutputSpec("loss"), OutputSpec("gradient", "w1"),
                          OutputSpec("gradient", "w2")],
              "process_groups": [{"name": "dp", "ranks": [0, 1]}]}
    return gm, header


def test_each_finding_is_one_warning_and_nothing_else(caplog: pytest.LogCaptureFixture) -> None:
    """One run, two findings: exactly two warnings (JointfxWarning, naming the caller's line),
    no WARNING on the "jointfx" logger, and each says which passes changed the graph."""
    gm, header = _ddp_step_graph()
    with warnings.catch_warnings(record=True) as caught, \
            caplog.at_level(logging.DEBUG, logger="jointfx"):
        warnings.simplefilter("always")
        new = run_pipeline(gm, "dce,tag-fsdp,bucket{kinds=ag,rs}", **header)
    report = new.meta["jointfx_report"]
    assert [p["changed"] for p in report["passes"]] == [True, False, False]
    findings = report["findings"]
    assert len(findings) == 2
    assert findings[0].startswith("tag-fsdp found no FSDP unshard chain")
    assert findings[1].startswith("bucket formed no bucket out of 2 collectives")
    for f in findings:
        assert f.endswith("; dce changed the graph, tag-fsdp and bucket did not")
    assert [(w.category, str(w.message)) for w in caught] == [
        (JointfxWarning, f"jointfx pipeline 'dce,tag-fsdp,bucket{{kinds=ag,rs}}': {f}")
        for f in findings]
    assert {w.filename for w in caught} == {__file__}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "tag-fsdp: unchanged" in caplog.text  # the per-pass lines stay, at INFO


def test_missing_specs_say_what_changed_and_warn_once() -> None:
    """A graph whose header lost its input specs: one warning (not also the exporter's "no
    input specs" one), and it does not claim the graph was left as it was when bucket and
    schedule changed it."""
    doc, gm = _fixture()
    gm.meta["jointfx"]["inputs"] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new = run_pipeline(gm, str(REPO / "configs" / "pipelines" / "default.json"))
    report = new.meta["jointfx_report"]
    changed = [p["name"] for p in report["passes"] if p["changed"]]
    unchanged = [p["name"] for p in report["passes"] if not p["changed"]]
    assert "bucket" in changed and "schedule" in changed and "tag-fsdp" in unchanged
    assert len(report["findings"]) == 1 and len(caught) == 1
    message = str(caught[0].message)
    assert "none marked as a parameter" in message and "left as it was" not in message
    assert message.endswith(f"; {', '.join(changed[:-1])} and {changed[-1]} changed the graph, "
                            f"{', '.join(unchanged[:-1])} and {unchanged[-1]} did not")


def test_jointfx_pass_in_a_torch_fx_pass_manager() -> None:
    from torch.fx.passes.infra.pass_base import PassBase, PassResult
    from torch.fx.passes.infra.pass_manager import PassManager

    _, gm = _fixture()
    regather = JointfxPass("tag-fsdp{reshard=always},remat", strict=True)
    assert isinstance(regather, PassBase)
    result = PassManager([regather, JointfxPass("dce")], steps=1)(gm)
    assert isinstance(result, PassResult) and result.modified
    stats = result.graph_module.meta["jointfx_report"]
    assert stats["pipeline"] == "dce"  # the last pass's report
    backward = [n for n in result.graph_module.graph.nodes
                if n.target is torch.ops._c10d_functional.all_gather_into_tensor.default
                and n.meta.get("phase") == "backward"]
    assert len(backward) == 20  # every parameter backward reads, re-gathered
    # A second round changes nothing, and says so.
    again = JointfxPass("dce")(result.graph_module)
    assert again is not None and not again.modified


def _extension_dir() -> Path:
    from jointfx.passes import _extension

    # build/python (or site-packages): the folder that holds the jointfx/ with the extension.
    return Path(_extension().__file__).parents[1]


@pytest.mark.parametrize("setting", ["jointfx", "+jointfx", None])
def test_torch_logs_jointfx_shows_the_per_pass_lines(setting: str | None) -> None:
    """TORCH_LOGS=jointfx (torch takes it as a module name: jointfx must be importable when
    torch is) prints the pipeline's per-pass INFO lines on stderr; +jointfx adds the remarks
    (DEBUG); without it they are not printed."""
    script = ("from jointfx import import_graph, load_graph, run_pipeline\n"
              f"gm = import_graph(load_graph({str(TRACED_DIR / 'fsdp_w2.json')!r}))\n"
              "run_pipeline(gm, 'dce,tag-fsdp{reshard=always},remat')\n")
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(_extension_dir())])
    if setting is not None:
        env["TORCH_LOGS"] = setting
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = ["jointfx pipeline 'dce,tag-fsdp{reshard=always},remat': 3 passes",
             "  dce: unchanged", "  tag-fsdp{reshard=always}: changed", "  remat: changed"]
    for line in lines:
        assert (line in r.stderr) == (setting is not None), (line, r.stderr[-3000:])
    assert ("jointfx remarks:" in r.stderr) == (setting == "+jointfx")
    assert "JointfxWarning" not in r.stderr


def test_collectives_unbucketed_for_memory_are_a_finding() -> None:
    # Under the input's own peak bucket keeps 18 of encoder_w2's collectives out of its buckets
    # (and forms others): a finding with the count. The default pipeline's bound (the reference
    # plan's peak, docs/passes.md "Reference plan") keeps none out: no finding.
    doc = load_graph(TRACED_DIR / "encoder_w2.json")
    prep = "dce,tag-fsdp,remat,dedup-fsdp-unshard"
    with pytest.warns(JointfxWarning, match=r"bucket left \d+ collectives unbucketed"):
        new = run_pipeline(import_graph(doc), prep + ",bucket{memory-limit=input}")
    report = new.meta["jointfx_report"]
    stats = [p["stats"] for p in report["passes"] if p["name"] == "bucket"][0]
    assert stats["unbucketed.memory"] > 0
    assert any(f"bucket left {stats['unbucketed.memory']} collectives" in f
               for f in report["findings"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", JointfxWarning)
        new = run_pipeline(import_graph(doc), prep + ",bucket{memory-limit=reference}")
    assert new.meta["jointfx_report"]["findings"] == []


def test_a_ddp_step_is_understood() -> None:
    """Plain DDP (gradient -> all_reduce -> wait -> gradient output): replica gradient chains,
    so no "found no FSDP unshard chain" finding, and bucket merges the two all-reduces."""
    from torch.fx.experimental.proxy_tensor import make_fx

    c10d = torch.ops._c10d_functional

    def step(w1: torch.Tensor, w2: torch.Tensor, x: torch.Tensor) -> list[torch.Tensor]:
        loss = (x @ w1 @ w2).sum()
        g1 = c10d.wait_tensor(c10d.all_reduce(torch.ones_like(w1), "sum", "dp"))
        g2 = c10d.wait_tensor(c10d.all_reduce(torch.ones_like(w2), "sum", "dp"))
        return [loss, g1, g2]

    gm = make_fx(step, tracing_mode="fake")(torch.randn(4, 4), torch.randn(4, 4),
                                            torch.randn(2, 4))
    _, header = _ddp_step_graph()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        new = run_pipeline(gm, "tag-fsdp,bucket{plan=size, kinds=ar, memory-limit=none}",
                           **header)
    report = new.meta["jointfx_report"]
    assert report["findings"] == [] and caught == []
    stats = {p["name"]: p.get("stats", {}) for p in report["passes"]}
    assert stats["tag-fsdp"]["replica-grad-all-reduces"] == 2
    assert stats["tag-fsdp"]["non-fsdp-collectives"] == 0
    assert stats["bucket"]["buckets.all_reduce"] == 1
