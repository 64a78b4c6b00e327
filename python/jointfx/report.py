"""What a pipeline did, said out loud: checks on the pass statistics, Python logging, and
torch's structured trace.

`run_pipeline` hands the C++ pass manager's report (per pass: name, options, changed, seconds,
statistics; the remarks log; total seconds) to `finish_report`, which

- checks it against the graph's header: a graph with parameters on which `tag-fsdp` finds no
  FSDP unshard chain, or `bucket` forms no FSDP bucket, or whose input specs mark no parameter,
  is almost always a graph jointfx did not understand (missing or wrong header specs, an FSDP
  flavour the analysis does not recognize), and the FSDP passes then do no FSDP work. Each
  finding says what was found, what was expected and which passes of the run changed the graph
  (their `changed` flags), and is reported once, on one channel: a `JointfxWarning` of its own
  (Python warnings; `logging.captureWarnings(True)` sends them to the "py.warnings" logger),
  or with `strict=True` (for CI) one `StrictCheckError` naming them all;
- logs a one-line summary per pass to the logger "jointfx" at INFO (remarks at DEBUG), shown by
  `TORCH_LOGS=jointfx` (`+jointfx` adds the remarks), `logging.basicConfig(level=logging.INFO)`
  or any handler on "jointfx";
- emits the whole report as a `jointfx_pipeline` artifact through
  `torch._logging.trace_structured`, so `TORCH_TRACE=<dir>` runs carry it for tlparse next to
  Inductor's own pass artifacts.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger("jointfx")


class JointfxWarning(UserWarning):
    """jointfx ran, but what it found in the graph is not what the pipeline expects."""


class StrictCheckError(ValueError):
    """A strict-mode check failed (run_pipeline(..., strict=True))."""


def _stats(report: Mapping[str, Any], name: str) -> list[Mapping[str, int]]:
    return [p.get("stats", {}) for p in report.get("passes", []) if p.get("name") == name]


def check_report(report: Mapping[str, Any], header: Mapping[str, Any]) -> list[str]:
    """Findings about a pipeline run on a graph whose header is `header` (the exported
    document's process_groups/inputs/outputs): one message per finding, empty when the
    statistics look like an FSDP graph the passes understood."""
    inputs: Sequence[Mapping[str, Any]] = header.get("inputs", [])
    params = [i for i in inputs if i.get("kind") == "parameter"]
    findings: list[str] = []
    ran = [p.get("name") for p in report.get("passes", [])]
    fsdp_passes = [n for n in dict.fromkeys(ran) if n in _FSDP_PASSES]
    if fsdp_passes and not params:
        findings.append(
            f"{len(inputs)} graph inputs, none marked as a parameter: {_names(fsdp_passes)} "
            "expect the parameter inputs in the header (InputSpec('parameter', fqn), the header "
            "import_graph or jointfx.trace stores in gm.meta['jointfx'], or "
            "jointfx.specs_from_traced(traced)); without them no FSDP unshard chain is "
            "recognized, so no all-gather is tagged, resharded or re-gathered in backward")
    for stats in _stats(report, "tag-fsdp"):
        chains = stats.get("chains-kept", 0) + stats.get("chains-resharded", 0)
        other = stats.get("non-fsdp-collectives", 0)
        # DDP: no all-gather to find, every gradient all-reduce understood.
        replicated = stats.get("replica-grad-all-reduces", 0) > 0 and other == 0
        if params and chains == 0 and not replicated:
            findings.append(
                f"tag-fsdp found no FSDP unshard chain (expected one all-gather chain per "
                f"sharded parameter, {len(params)} parameters in the header); "
                f"{other} collectives did not look like FSDP")
        elif params and other and chains < len(params) // 2:
            findings.append(
                f"tag-fsdp found {chains} FSDP unshard chains for {len(params)} parameters and "
                f"{other} collectives that did not look like FSDP")
    for stats in _stats(report, "bucket"):
        buckets = sum(v for k, v in stats.items() if k.startswith("buckets."))
        if params and buckets == 0 and stats.get("collectives-before", 0) > 0:
            findings.append(
                f"bucket formed no bucket out of {stats.get('collectives-before', 0)} "
                f"collectives on a graph with {len(params)} parameters (expected FSDP "
                "all-gathers / reduce-scatters grouped per block)")
        elif stats.get("unbucketed.memory", 0) > 0:
            findings.append(
                f"bucket left {stats['unbucketed.memory']} collectives unbucketed to keep the "
                f"estimated peak within its memory bound ({stats.get('memory-limit', 0)} B); "
                "the default pipeline's bound is the reference plan's peak "
                "(docs/passes.md, 'Reference plan')")
    if findings:
        what_changed = changes(report)
        findings = [f"{f}; {what_changed}" for f in findings]
    return findings


_FSDP_PASSES = ("tag-fsdp", "remat", "dedup-fsdp-unshard", "bucket")


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def changes(report: Mapping[str, Any]) -> str:
    """Which passes of the run changed the graph, from their `changed` flags:
    "dce and bucket changed the graph, tag-fsdp did not" / "no pass changed the graph"."""
    passes = report.get("passes", [])
    changed = list(dict.fromkeys(str(p.get("name")) for p in passes if p.get("changed")))
    unchanged = [n for n in dict.fromkeys(str(p.get("name")) for p in passes)
                 if n not in changed]
    if not changed:
        return "no pass changed the graph"
    text = f"{_names(changed)} changed the graph"
    if unchanged:
        text += f", {_names(unchanged)} did not"
    return text


def _summary_line(p: Mapping[str, Any]) -> str:
    stats = ", ".join(f"{k}={v}" for k, v in sorted(p.get("stats", {}).items()))
    opts = p.get("options") or ""
    if opts and not opts.startswith("{"):
        opts = "{" + opts + "}"
    name = f"{p.get('name')}{opts}"
    changed = "changed" if p.get("changed") else "unchanged"
    return f"{name}: {changed}, {1000 * p.get('seconds', 0.0):.2f} ms" + (
        f" ({stats})" if stats else "")


def finish_report(report: dict[str, Any], header: Mapping[str, Any], pipeline: str, *,
                  strict: bool = False) -> dict[str, Any]:
    """Adds `pipeline` and `findings` to `report`, logs and traces it, and reports each finding
    once: a JointfxWarning apiece naming the code that called into jointfx, or one
    StrictCheckError naming them all with `strict`. Returns the report."""
    findings = check_report(report, header)
    report["pipeline"] = pipeline
    report["findings"] = findings
    if log.isEnabledFor(logging.INFO):
        log.info("jointfx pipeline %r: %d passes, %.2f ms", pipeline,
                 len(report.get("passes", [])), 1000 * report.get("total_seconds", 0.0))
        for p in report.get("passes", []):
            log.info("  %s", _summary_line(p))
    if report.get("log"):
        log.debug("jointfx remarks:\n%s", report["log"].rstrip())
    _trace_structured(report)
    if findings and strict:
        raise StrictCheckError(f"jointfx pipeline {pipeline!r}: " + "; ".join(findings))
    if findings:
        level = _caller_stacklevel()
        for f in findings:
            warnings.warn(f"jointfx pipeline {pipeline!r}: {f}", JointfxWarning,
                          stacklevel=level)
    return report


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _caller_stacklevel() -> int:
    """The warnings.warn stacklevel, called from here, of the first frame outside the jointfx
    package: the code that called run_pipeline, a graph_pass or a JointfxPass."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _trace_structured(report: Mapping[str, Any]) -> None:
    try:
        from torch._logging import trace_structured
    except ImportError:  # an older torch: logging alone
        return
    trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": "jointfx_pipeline", "encoding": "json"},
        payload_fn=lambda: json.dumps(report, sort_keys=True),
        expect_trace_id=False,  # also outside torch.compile (GraphTrainer, plain calls)
    )
