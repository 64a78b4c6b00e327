"""jointfx as one pass of torchtitan's GraphTrainer (torchtitan 0.3.0, experiments/graph_trainer).

GraphTrainer traces the whole training step (forward, loss, backward) with
`make_fx_tracer.minimal_fx_tracer` and applies a list of passes, each called as
`pass_fn(gm, example_inputs, **kwargs) -> gm` (`passes.apply_graph_passes`), ending with
Inductor. `jointfx_pass(pipeline, traced=...)` is such a pass:

    from torchtitan.experiments.graph_trainer import passes as gt
    traced = minimal_fx_tracer(make_fwd_bwd_step(model, loss_fn), module=model)(*args)
    pass_list = [gt.eliminate_dead_code_pass, gt.canonicalize_graph_pass,
                 jointfx.graph_trainer.jointfx_pass("tag-fsdp{reshard=always},remat",
                                                    traced=traced, model=model),
                 partial(joint_transformer_block_bucketing_reordering_pass, ...),
                 partial(full_inductor_compilation_pass)]
    gm = gt.apply_graph_passes(traced.gm, traced.example_inputs, pass_list)

Keyword arguments the pass list hands every pass (GraphTrainer's `config=...`) are accepted
and ignored. The header specs jointfx needs (which placeholder is which parameter, the
gradients, the DeviceMesh placeholders SimpleFSDP's DTensors flatten to, the process groups the
collectives name) are derived from the tracer's `TracedResult` by `specs_from_traced`, so no
spec is written by hand (`jointfx.specs_from_traced`); without `traced`, the pass uses whatever header the GraphModule
carries. The returned GraphModule keeps the signature (placeholders and outputs in order), so
`run_traced`, later passes and Inductor take it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from jointfx.export import specs_from_traced
from jointfx.passes import run_pipeline

__all__ = ["jointfx_pass", "specs_from_traced"]


def jointfx_pass(pipeline: str, *, traced: Any = None, model: torch.nn.Module | None = None,
                 strict: bool = False, verify: bool = True,
                 **export_kwargs: Any) -> Callable[..., fx.GraphModule]:
    """A GraphTrainer pass `(gm, example_inputs, **kwargs) -> gm` running the jointfx
    `pipeline` (see `jointfx passes`). Header specs come from `traced` (and `model`) when given,
    else from `export_kwargs` or the GraphModule's own header. `strict` turns the report's
    findings (e.g. no FSDP chain found) into errors."""

    def jointfx_graph_pass(gm: fx.GraphModule, example_inputs: Any = None,
                           **_ignored: Any) -> fx.GraphModule:
        kwargs = dict(export_kwargs)
        if traced is not None:
            for k, v in specs_from_traced(traced, model).items():
                kwargs.setdefault(k, v)
        return run_pipeline(gm, pipeline, verify=verify, strict=strict, **kwargs)

    jointfx_graph_pass.__name__ = "jointfx_pass"  # what GraphTrainer's logs and disable_passes use
    jointfx_graph_pass.__qualname__ = "jointfx_pass"
    jointfx_graph_pass.pipeline = pipeline  # type: ignore[attr-defined]
    return jointfx_graph_pass
