"""run_pipeline is loud, not silent: findings on graphs the FSDP passes did not understand warn
(or raise with strict=True), and the report goes to the "jointfx" logger and to torch's
structured trace (what tlparse reads)."""

from __future__ import annotations

import json
import logging
import warnings

import pytest
import torch
import torch.fx as fx

from conftest import TRACED_DIR
from jointfx import (
    InputSpec,
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
