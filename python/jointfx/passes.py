"""Running C++ pass pipelines on torch.fx graphs in process.

`run_pipeline(gm, "dce,tag-fsdp{reshard=always},remat")` exports the GraphModule to the JSON
interchange format in memory, runs the C++ pass manager through the `_jointfx_C` extension (no
files, no subprocess), and imports the result. `graph_pass(spec)` wraps that as a pass with
GraphTrainer's signature `(gm, example_inputs, **kwargs) -> gm`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch.fx as fx

from jointfx.export import dumps_graph, export_graph, import_graph
from jointfx.report import finish_report


class PipelineError(ValueError):
    """A pipeline could not run: the message is the C++ pass manager's, with its location."""


def _extension() -> Any:
    try:
        import _jointfx_C
    except ImportError as e:  # built by scripts/build into build/python, or by `pip install .`
        raise ImportError("the extension _jointfx_C is not on sys.path: run scripts/build and add "
                          "build/python to PYTHONPATH, or `pip install .`") from e
    return _jointfx_C


def run_pipeline_doc(doc: Mapping[str, Any], pipeline: str, *, verify: bool = True,
                     timing: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Runs `pipeline` on a JSON v1 document; returns (new document, report)."""
    ext = _extension()
    try:
        out, report = ext.run_pipeline_json(dumps_graph(doc), pipeline, verify, timing)
    except ext.JointfxError as e:
        raise PipelineError(str(e)) from None
    return json.loads(out), report


def run_pipeline(gm: fx.GraphModule, pipeline: str, *, verify: bool = True,
                 process_groups: Sequence[Any] | None = None,
                 inputs: Sequence[Any] | None = None,
                 outputs: Sequence[Any] | None = None,
                 graph_meta: Mapping[str, Any] | None = None,
                 strict: bool = False) -> fx.GraphModule:
    """Hands `gm` to the C++ pass manager and returns the transformed GraphModule.

    Header arguments (process groups, input kinds/FQNs, output specs) default to what
    import_graph stored on `gm`, so graphs loaded from fixtures need none of them.
    The report (per-pass statistics and seconds, remarks, findings) is in
    `new_gm.meta["jointfx_report"]`, logged to the "jointfx" logger and traced for tlparse;
    findings warn (JointfxWarning), or raise StrictCheckError with `strict` (jointfx.report).
    """
    doc = export_graph(gm, process_groups=process_groups, inputs=inputs, outputs=outputs,
                       graph_meta=graph_meta)
    new_doc, report = run_pipeline_doc(doc, pipeline, verify=verify, timing=True)
    finish_report(report, doc, pipeline, strict=strict)
    new_gm = import_graph(new_doc)
    new_gm.meta["jointfx_report"] = report
    return new_gm


def graph_pass(pipeline: str, **export_kwargs: Any) -> Callable[..., fx.GraphModule]:
    """A GraphTrainer-style pass `(gm, example_inputs, **kwargs) -> gm` running `pipeline`.

    `export_kwargs` go to run_pipeline; the keyword arguments a pass list hands every pass
    (GraphTrainer's `config=...` and the like) are accepted and ignored."""

    def jointfx_pass(gm: fx.GraphModule, example_inputs: Any = None, **_: Any) -> fx.GraphModule:
        return run_pipeline(gm, pipeline, **export_kwargs)

    jointfx_pass.__name__ = f"jointfx[{pipeline}]"
    return jointfx_pass


def pass_names() -> list[str]:
    """The registered C++ passes."""
    return list(_extension().pass_names())
