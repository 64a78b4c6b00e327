"""A small conv + BatchNorm image classifier, traced as a joint FSDP graph that updates buffers.

BatchNorm in training mode updates its running statistics; `make_fx` records that as it happens
in eager mode, in place: `aten.native_batch_norm.default(x, w, b, running_mean, running_var,
True, momentum, eps)` writes the two buffer placeholders, and `aten.add_.Tensor(
num_batches_tracked, 1)` counts the step (docs/graph-format.md, "Buffer updates"). The graph
meta records how the module initializes each buffer (`buffer_init`), so `jointfx exec` starts
the running variance at one, as PyTorch does, rather than at random values.

Sharding, hooks and meta come from jointfx.trace (SimpleFSDP in miniature): parameters are
FSDP-sharded on dim 0 and all-gathered per module; buffers are whole on every rank, and each rank
updates its own running statistics from its own batch, as BatchNorm does under FSDP or DDP
without SyncBatchNorm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.fx.traceback as fx_traceback
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.experimental.proxy_tensor import make_fx

from jointfx.export import InputSpec, OutputSpec
from jointfx.trace import (
    ParamLayout,
    TracedGraph,
    TraceConfig,
    _FsdpUnshard,
    _ident,
    _install_backward_meta_hooks,
    _ModuleHooks,
    _normalize_meta,
    _rename_placeholders,
    _UnshardSpec,
    init_fake_world,
    setup_groups,
    shard_param,
)


@dataclass(frozen=True)
class ConvBnArgs:
    in_channels: int = 3
    channels: int = 8
    n_layers: int = 2
    n_classes: int = 10
    image_size: int = 8
    batch_size: int = 4
    momentum: float = 0.1
    eps: float = 1e-5


class ConvBnBlock(nn.Module):
    def __init__(self, cin: int, cout: int, args: ConvBnArgs) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=args.eps, momentum=args.momentum)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(x)))


class ConvBnNet(nn.Module):
    """layers.N = conv -> BatchNorm2d -> relu; then global average pool and a linear head."""

    def __init__(self, args: ConvBnArgs) -> None:
        super().__init__()
        self.layers = nn.ModuleDict()
        cin = args.in_channels
        for i in range(args.n_layers):
            self.layers[str(i)] = ConvBnBlock(cin, args.channels, args)
            cin = args.channels
        self.head = nn.Linear(args.channels, args.n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images
        for layer in self.layers.values():
            x = layer(x)
        return self.head(x.mean(dim=(2, 3)))


def build_convbn(args: ConvBnArgs, *, seed: int = 0) -> ConvBnNet:
    """The module with PyTorch's default init under `seed`; BatchNorm buffers as constructed
    (running_mean 0, running_var 1, num_batches_tracked 0)."""
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = ConvBnNet(args)
    return model.train()


def buffer_init_kinds(model: nn.Module) -> dict[str, str]:
    """`buffer_init` graph meta: "zeros" / "ones" for each buffer that is constant at trace time
    (BatchNorm's running statistics and step counter); other buffers are left out."""
    out: dict[str, str] = {}
    for fqn, b in model.named_buffers():
        if b.numel() and bool((b == 0).all()):
            out[fqn] = "zeros"
        elif b.numel() and bool((b == 1).all()):
            out[fqn] = "ones"
    return out


def param_layouts(model: nn.Module, fsdp_size: int) -> list[ParamLayout]:
    layouts = []
    for fqn, p in model.named_parameters():
        shape = tuple(p.shape)
        rows = -(-shape[0] // fsdp_size)
        layouts.append(ParamLayout(fqn, shape, shape, (rows, *shape[1:])))
    return layouts


def trace_convbn(args: ConvBnArgs | None = None) -> TracedGraph:
    """Traces [loss, *grads] of one training step on the current torch.distributed world; the
    BatchNorm buffers are graph inputs that the graph updates in place."""
    args = args or ConvBnArgs()
    groups = setup_groups(0)
    model = build_convbn(args)
    fsdp_size = groups.fsdp.size
    layouts = param_layouts(model, fsdp_size)
    specs = {lay.fqn: _UnshardSpec(groups.fsdp.name, fsdp_size, lay.local_shape[0], None, None)
             for lay in layouts}
    buffer_names = [name for name, _ in model.named_buffers()]
    init_kinds = buffer_init_kinds(model)
    n_params, n_buffers = len(layouts), len(buffer_names)
    current: dict[str, torch.Tensor] = {}
    hooks = _ModuleHooks(model, lambda fqn: _FsdpUnshard.apply(current[fqn], specs[fqn]))
    seq_base: list[int] = []

    def step(*flat: torch.Tensor) -> list[torch.Tensor]:
        seq_base.append(torch.autograd._get_sequence_nr())
        shards = flat[:n_params]
        current.update({lay.fqn: s for lay, s in zip(layouts, shards)})
        for name, value in zip(buffer_names, flat[n_params:n_params + n_buffers]):
            owner, _, leaf = name.rpartition(".")
            model.get_submodule(owner)._buffers[leaf] = value
        images, labels = flat[n_params + n_buffers:]
        logits = model(images)
        with fx_traceback.annotate({"module_fqn": "loss"}):
            loss = F.cross_entropy(logits, labels)
        _install_backward_meta_hooks(loss)
        with fx_traceback._set_autograd_backward():
            grads = torch.autograd.grad(loss, shards)
        return [loss, *grads]

    example = [torch.zeros(lay.shard_shape, requires_grad=True) for lay in layouts]
    example += [model.get_buffer(b).clone() for b in buffer_names]
    example += [torch.zeros(args.batch_size, args.in_channels, args.image_size, args.image_size),
                torch.zeros(args.batch_size, dtype=torch.long)]
    try:
        with fx_traceback.preserve_node_meta():
            gm = make_fx(step, tracing_mode="fake")(*example)
    finally:
        hooks.remove()
    names = ([_ident(lay.fqn) for lay in layouts] + [_ident(b) for b in buffer_names]
             + ["images", "labels"])
    gm = _rename_placeholders(gm, names)
    _normalize_meta(gm.graph, seq_base[0])
    _drop_dead_empty(gm.graph)

    inputs = ([InputSpec("parameter", lay.fqn) for lay in layouts]
              + [InputSpec("buffer", b) for b in buffer_names]
              + [InputSpec("user_input"), InputSpec("user_input")])
    outputs = [OutputSpec("loss")] + [OutputSpec("gradient", lay.fqn) for lay in layouts]
    graph_meta: dict[str, Any] = {
        "buffer_init": init_kinds,
        "mesh": {"dim_names": ["fsdp"], "shape": [dist.get_world_size()]},
        "model": {"family": "convbn", **{k: getattr(args, k) for k in ConvBnArgs.__dataclass_fields__}},
        "traced_rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
    }
    cfg = TraceConfig(batch_size=args.batch_size)
    return TracedGraph(gm, inputs, outputs, [groups.fsdp], graph_meta, layouts, cfg)


def _drop_dead_empty(graph: fx.Graph) -> None:
    # BatchNorm's CPU path allocates an unused reserve buffer (aten.empty of 0 bytes): no reader,
    # no effect.
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.empty.memory_format \
                and not node.users:
            graph.erase_node(node)


def trace_convbn_world(world_size: int, args: ConvBnArgs | None = None) -> TracedGraph:
    """Initializes a fake world of `world_size` ranks (rank 0) and traces the model."""
    init_fake_world(world_size)
    return trace_convbn(args)


def real_inputs(traced: TracedGraph, args: ConvBnArgs, *, seed: int = 0, rank: int = 0,
                fsdp_size: int = 1) -> list[torch.Tensor]:
    """This rank's parameter shards of `build_convbn(args, seed)`, its buffers, and a seeded
    global batch (images, labels); the caller slices the batch per rank."""
    model = build_convbn(args, seed=seed)
    params = dict(model.named_parameters())
    shards = [shard_param(params[lay.fqn].detach(), lay, fsdp_rank=rank, fsdp_size=fsdp_size,
                          tp_rank=0, tp_size=1) for lay in traced.layouts]
    buffers = [b.clone() for _, b in model.named_buffers()]
    return [*shards, *buffers]
