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
spec is written by hand; without `traced`, the pass uses whatever header the GraphModule
carries. The returned GraphModule keeps the signature (placeholders and outputs in order), so
`run_traced`, later passes and Inductor take it unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx as fx

from jointfx.export import InputSpec, OutputSpec, ProcessGroupSpec
from jointfx.passes import run_pipeline

_COLLECTIVE_GROUP_ARG = {  # _c10d_functional op -> position of its group_name argument
    "all_gather_into_tensor": 2,
    "reduce_scatter_tensor": 3,
    "all_reduce": 2,
    "all_to_all_single": 3,
}


def _flat_counts(layouts: Mapping[int, Any], n: int) -> list[int]:
    return [layouts[i].num_tensors if i in layouts else 1 for i in range(n)]


def process_groups_of(gm: fx.GraphModule, world: int | None = None) -> list[ProcessGroupSpec]:
    """One spec per group name the graph's collectives carry, over all `world` ranks (default:
    the initialized world): SimpleFSDP's 1-D mesh is the whole world."""
    if world is None:
        import torch.distributed as dist

        world = dist.get_world_size()
    names: list[str] = []
    for n in gm.graph.nodes:
        target = n.target
        if (n.op != "call_function" or not isinstance(target, torch._ops.OpOverload)
                or target.namespace != "_c10d_functional"):
            continue
        pos = _COLLECTIVE_GROUP_ARG.get(target._opname)
        if pos is None:
            continue
        name = n.args[pos] if len(n.args) > pos else n.kwargs.get("group_name")
        if isinstance(name, str) and name not in names:
            names.append(name)
    return [ProcessGroupSpec(name, tuple(range(world))) for name in names]


def specs_from_traced(traced: Any, model: torch.nn.Module | None = None,
                      gm: fx.GraphModule | None = None) -> dict[str, Any]:
    """Header specs for a graph minimal_fx_tracer produced: {"inputs", "outputs",
    "process_groups"} for run_pipeline / export_graph.

    Inputs: each state entry (traced.state_fqns; a DTensor flattens to its local tensor and its
    DeviceMesh) gives a parameter (or buffer, when `model` names it so) spec on its first
    placeholder; the mesh and the step's own inputs are user inputs. Outputs: GraphTrainer's step
    returns [loss, *grads] in the order of `model.named_parameters(remove_duplicate=False)`
    with requires_grad (the state order without `model`); each gradient's first flat tensor
    is the gradient, its mesh "other".
    """
    gm = gm if gm is not None else traced.gm
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    counts = _flat_counts(traced.input_subclass_layouts, traced.num_flat_inputs)
    if sum(counts) != len(placeholders):
        raise ValueError(f"traced result flattens to {sum(counts)} inputs, the graph has "
                         f"{len(placeholders)} placeholders")
    buffers = {k for k, _ in model.named_buffers()} if model is not None else set()
    inputs: list[InputSpec] = []
    for i, count in enumerate(counts):
        if i < len(traced.state_fqns):
            fqn = traced.state_fqns[i]
            kind = "buffer" if fqn in buffers else "parameter"
            inputs.append(InputSpec(kind, fqn))
            inputs.extend(InputSpec("user_input") for _ in range(count - 1))
        else:
            inputs.extend(InputSpec("user_input") for _ in range(count))
    if model is not None:
        grad_fqns = [k for k, p in model.named_parameters(remove_duplicate=False)
                     if p.requires_grad]
    else:
        grad_fqns = [f for f in traced.state_fqns if f not in buffers]
    out_counts = _flat_counts(traced.output_subclass_layouts, traced.num_flat_outputs)
    outputs: list[OutputSpec] = []
    for i, count in enumerate(out_counts):
        if i == 0:
            outputs.append(OutputSpec("loss"))
        elif i - 1 < len(grad_fqns):
            outputs.append(OutputSpec("gradient", grad_fqns[i - 1]))
        else:
            outputs.append(OutputSpec("other"))
        outputs.extend(OutputSpec("other") for _ in range(count - 1))
    return {"inputs": inputs, "outputs": outputs, "process_groups": process_groups_of(gm)}


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
            for k, v in specs_from_traced(traced, model, gm).items():
                kwargs.setdefault(k, v)
        return run_pipeline(gm, pipeline, verify=verify, strict=strict, **kwargs)

    jointfx_graph_pass.__name__ = "jointfx_pass"  # what GraphTrainer's logs and disable_passes use
    jointfx_graph_pass.__qualname__ = "jointfx_pass"
    jointfx_graph_pass.pipeline = pipeline  # type: ignore[attr-defined]
    return jointfx_graph_pass
