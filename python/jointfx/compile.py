"""jointfx inside torch.compile: on the joint graph aot_autograd builds, before partitioning.

Two entry points, both running a tagging pipeline (default `tag-fsdp{reshard=always}`) whose
MUST_SAVE / MUST_RECOMPUTE decisions the min-cut partitioner then realizes: resharded weights
are re-gathered in the backward graph instead of being saved, with no `remat` pass.

- `JointGraphPass(pipeline)`: an Inductor `CustomGraphPass` (with `uuid()`, so Inductor's FX
  graph cache keys on the pipeline) for `torch._inductor.config.joint_custom_pre_pass`:

      torch._inductor.config.joint_custom_pre_pass = jointfx.compile.JointGraphPass()
      torch.compile(step)(...)

- `partition_fn(pipeline)`: a partitioner for `aot_autograd(..., partition_fn=...)` that runs
  the pipeline and then `min_cut_rematerialization_partition`.

The joint graph's placeholders are `primals_*` (parameters and inputs) and `tangents_*`; phases
are derived here (a node that depends on a tangent is backward, every other node forward), and
the primals are offered to the FSDP analysis as parameters (only those whose value is
all-gathered form chains). The pipeline's tags are copied back onto the caller's nodes by name,
so the graph is edited in place and nothing else about it changes; a pipeline that adds or
removes nodes is refused here (use it through run_pipeline/graph_pass instead).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from jointfx._version import __version__
from jointfx.export import InputSpec, OutputSpec
from jointfx.passes import run_pipeline

DEFAULT_PIPELINE = "tag-fsdp{reshard=always}"


class JointGraphWarning(UserWarning):
    """A warning of the pipeline run on a torch.compile joint graph (tag_joint_graph)."""


def _joint_phases(graph: fx.Graph) -> dict[fx.Node, str]:
    backward: set[fx.Node] = set()
    phases: dict[fx.Node, str] = {}
    for n in graph.nodes:
        if n.op == "placeholder":
            if n.name.startswith("tangents"):
                backward.add(n)
            continue
        if n.op == "output":
            continue
        if any(i in backward for i in n.all_input_nodes):
            backward.add(n)
        phases[n] = "backward" if n in backward else "forward"
    return phases


def tag_joint_graph(graph: fx.Graph, pipeline: str = DEFAULT_PIPELINE, *,
                    strict: bool = False) -> dict[str, Any]:
    """Runs the tagging `pipeline` on aot_autograd's joint graph and sets meta["recompute"] on
    the caller's nodes from its result, in place. Returns the report."""
    from torch.utils.checkpoint import CheckpointPolicy

    # A copy to export: a GraphModule built on `graph` itself would take ownership of it.
    copy = fx.Graph()
    out = copy.graph_copy(graph, {})
    copy.output(out)
    for n, ph in _joint_phases(copy).items():
        n.meta["phase"] = ph
    gm = fx.GraphModule(graph.owning_module or torch.nn.Module(), copy)
    placeholders = [n for n in copy.nodes if n.op == "placeholder"]
    inputs = [InputSpec("parameter", n.name) if n.name.startswith("primals")
              else InputSpec("user_input") for n in placeholders]
    n_out = len(out) if isinstance(out, (list, tuple)) else 1
    new = run_pipeline(gm, pipeline, inputs=inputs, outputs=[OutputSpec("other")] * n_out,
                       strict=strict)
    old = {n.name: n for n in graph.nodes}
    new_nodes = {n.name: n for n in new.graph.nodes}
    if old.keys() != new_nodes.keys():
        raise ValueError(f"pipeline {pipeline!r} added or removed nodes; on a torch.compile joint "
                         "graph only tagging pipelines (tag-fsdp, ...) apply in place")
    graph_id = 0
    for name, n in new_nodes.items():
        policy = n.meta.get("recompute")
        if isinstance(policy, CheckpointPolicy) and old[name].meta.get("recompute") != policy:
            old[name].meta["recompute"] = policy
            # The partitioner groups tagged nodes by checkpoint region; one region per chain
            # boundary is enough for FSDP gathers, which never neighbour each other's saves.
            old[name].meta.setdefault("ac_graph_id", graph_id)
    report = new.meta["jointfx_report"]
    # The pipeline's warnings (a reshard policy that found no blocks and fell back, say) reach
    # the caller as Python warnings: inside torch.compile nobody reads the report.
    for line in report.get("log", "").splitlines():
        if line.startswith("warning: "):
            warnings.warn(f"jointfx (torch.compile joint graph): {line.removeprefix('warning: ')}",
                          JointGraphWarning, stacklevel=2)
    return report


class JointGraphPass:
    """An Inductor CustomGraphPass running a jointfx tagging pipeline on the joint graph."""

    def __init__(self, pipeline: str = DEFAULT_PIPELINE, *, strict: bool = False) -> None:
        self.pipeline = pipeline
        self.strict = strict
        self.last_report: dict[str, Any] | None = None

    def __call__(self, graph: fx.Graph) -> None:
        self.last_report = tag_joint_graph(graph, self.pipeline, strict=self.strict)

    def uuid(self) -> str:
        key = f"jointfx {__version__} {self.pipeline} strict={self.strict}"
        return hashlib.sha256(key.encode()).hexdigest()


try:  # a real subclass where Inductor provides the base, so isinstance checks hold
    from torch._inductor.custom_graph_pass import CustomGraphPass as _Base

    JointGraphPass = type("JointGraphPass", (JointGraphPass, _Base), {})  # type: ignore[misc]
except ImportError:  # pragma: no cover - older torch
    pass


def partition_fn(pipeline: str = DEFAULT_PIPELINE, *,
                 strict: bool = False) -> Callable[..., Any]:
    """A partition_fn for aot_autograd: the jointfx tagging pipeline, then the min-cut
    partitioner, which saves what is MUST_SAVE and recomputes what is MUST_RECOMPUTE."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def jointfx_partition(joint_module: fx.GraphModule, joint_inputs: Any,
                          **kwargs: Any) -> Any:
        tag_joint_graph(joint_module.graph, pipeline, strict=strict)
        joint_module.recompile()
        return min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)

    return jointfx_partition
