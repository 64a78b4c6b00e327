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

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from jointfx.export import specs_from_traced
from jointfx.passes import run_pipeline
from jointfx.report import JointfxWarning

__all__ = ["drop_backward_recompute_tags", "jointfx_pass", "specs_from_traced"]


def jointfx_pass(pipeline: str, *, traced: Any = None, model: torch.nn.Module | None = None,
                 model_fn: Callable[[], torch.nn.Module | None] | None = None,
                 gt_config: Any = None, warn_untagged: bool = True, strict: bool = False,
                 verify: bool = True,
                 **export_kwargs: Any) -> Callable[..., fx.GraphModule]:
    """A GraphTrainer pass `(gm, example_inputs, **kwargs) -> gm` running the jointfx
    `pipeline` (see `jointfx passes`). Header specs come from `traced` (and `model`, or
    `model_fn()` asked when the pass runs) when given, else from `export_kwargs` or the
    GraphModule's own header. `strict` turns the report's findings (e.g. no FSDP chain found)
    into errors.

    GraphTrainer's SAC (`tag_with_memory_policy_pass`) tags forward nodes with
    `meta["recompute"]`; placed after it, the pipeline's `remat` realizes those tags together
    with tag-fsdp's, each recomputed node cloned once (docs/torchtitan.md). A recompute tag left
    on a backward node (a clone carries its original's) means nothing to jointfx but would make
    GraphTrainer's `selective_activation_remat_pass`, run later, copy the node again, so the
    pass drops such tags.

    Placed before the memory policy, jointfx's re-gathers would be invisible to it: SAC then
    tags every forward node again (overwriting tag-fsdp's tags) and its remat gathers a second
    time, in backward, each parameter that a recomputed node reads (the RMSNorm weights). With
    `gt_config` (the GraphTrainer config) the pass, finding no recompute tag on the graph, first
    applies GraphTrainer's memory policy itself (`tag_with_memory_policy_pass`), so its remat
    realizes SAC's tags too and leaves the later SAC passes nothing to recompute from a gather.
    Without `gt_config` it warns (JointfxWarning) that a later memory policy would do that
    (unless `warn_untagged=False`: a caller that knows none follows, as jointfx.torchtitan's
    pipelines do)."""

    def jointfx_graph_pass(gm: fx.GraphModule, example_inputs: Any = None,
                           **_ignored: Any) -> fx.GraphModule:
        kwargs = dict(export_kwargs)
        if traced is not None:
            module = model if model is not None else (model_fn() if model_fn else None)
            for k, v in specs_from_traced(traced, module).items():
                kwargs.setdefault(k, v)
        untagged = not any("recompute" in n.meta for n in gm.graph.nodes
                           if not n.meta.get("autograd_backward"))
        if untagged and gt_config is not None and _runs_remat(pipeline):
            from torchtitan.experiments.graph_trainer.memory_policy import (
                tag_with_memory_policy_pass,
            )

            gm = tag_with_memory_policy_pass(gm, config=gt_config)
        gm = run_pipeline(gm, pipeline, verify=verify, strict=strict, **kwargs)
        if untagged and gt_config is None and warn_untagged and _runs_remat(pipeline):
            # A warning, not a finding: whether a memory policy follows is not this graph's to
            # say (a pass list without SAC has none).
            warnings.warn(f"jointfx pipeline {pipeline!r}: no recompute tag on the graph: if "
                          "GraphTrainer's memory policy (tag_with_memory_policy_pass) runs after "
                          "this pass, it overwrites tag-fsdp's tags and its remat gathers again, "
                          "in backward, what a recomputed node reads; place the pass after it or "
                          "give the pass gt_config", JointfxWarning, stacklevel=2)
        drop_backward_recompute_tags(gm)
        _rename_clones_of_live_nodes(gm)
        return gm

    jointfx_graph_pass.__name__ = "jointfx_pass"  # what GraphTrainer's logs and disable_passes use
    jointfx_graph_pass.__qualname__ = "jointfx_pass"
    jointfx_graph_pass.pipeline = pipeline  # type: ignore[attr-defined]
    return jointfx_graph_pass


def _runs_remat(pipeline: str) -> bool:
    """Whether the pipeline (a pass list or a pipeline file) has jointfx's remat pass."""
    import json
    from pathlib import Path

    path = Path(pipeline)
    if pipeline.endswith(".json") and path.is_file():
        return any(p.get("name") == "remat" for p in json.loads(path.read_text())["passes"])
    return "remat" in {part.split("{")[0].strip() for part in pipeline.split(",")}


def _rename_clones_of_live_nodes(gm: fx.GraphModule) -> None:
    """Renames a backward clone "<X>_recomputed" whose forward original X is still in the graph
    to "<X>_jfx_recomputed": GraphTrainer's selective_activation_remat_pass names its own copy
    of X "<X>_recomputed" by assignment, without asking the graph's namespace, and two nodes of
    one name fail graph.lint(). (jointfx saves some nodes SAC recomputes: a chain that writes a
    value in place, such as RMSNorm's mean().add_(eps).)"""
    names = {n.name for n in gm.graph.nodes}
    for n in list(gm.graph.nodes):
        if (n.meta.get("autograd_backward") and n.name.endswith("_recomputed")
                and n.name[:-len("_recomputed")] in names):
            n._rename(n.name[:-len("_recomputed")] + "_jfx_recomputed")
    gm.recompile()


def drop_backward_recompute_tags(gm: fx.GraphModule) -> int:
    """Removes `meta["recompute"]` from backward nodes (`meta["autograd_backward"]`); returns
    how many. Recompute tags steer what forward values backward recomputes, so on a backward
    node they are left over from a clone's original."""
    dropped = 0
    for n in gm.graph.nodes:
        if n.meta.get("autograd_backward") and "recompute" in n.meta:
            del n.meta["recompute"]
            dropped += 1
    return dropped
