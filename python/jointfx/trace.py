"""Traces joint forward+loss+backward FSDP graphs of any nn.Module, without a GPU.

`trace(model, loss_fn, example_inputs, targets, world_size=...)` is the general entry point
(`jointfx.trace(...)` calls it); `trace_joint` / `trace_variant` trace the tiny Llama
(jointfx.model) as one use of it. SimpleFSDP in miniature (docs/pytorch-bridge.md has the details
and what the traces contain):

* Every parameter is held as a local shard on dim 0 (after TP sharding, if any). Shards are
  padded to ceil(dim0 / N) rows, so the graph is the same on every rank even when dim 0 does not
  divide by N; the padding rows are zero.
* When a module runs, a forward pre-hook all-gathers the shards of the parameters it owns through
  `_FsdpUnshard`, an autograd.Function whose forward is [cast] -> all_gather_into_tensor -> wait
  -> [slice off the padding] and whose backward is [pad] -> [cast] -> reduce_scatter_tensor ->
  wait. The collectives are the `_c10d_functional` ops, called by group name.
* `make_fx(tracing_mode="fake")` traces `step(*shards, *buffers, *inputs, *targets) -> [loss,
  *grads]` inside `preserve_node_meta()`, with our own autograd hooks so backward nodes carry
  `autograd_backward` and the `seq_nr` of their forward op (FX sets neither by itself outside
  torch.compile).

Process groups come from whatever `torch.distributed` is initialized with: the fake backend for
fixtures at any world size, or a real gloo group (world 1 in-process) for numerics.
"""

from __future__ import annotations

import contextlib
import copy
import math
import re
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
import torch.fx.traceback as fx_traceback
from torch import fx, nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from jointfx.export import GM_META_KEY, InputSpec, OutputSpec, ProcessGroupSpec
from jointfx.model import ModelArgs, Transformer, cross_entropy_loss, init_weights

_c10d = torch.ops._c10d_functional

VARIANTS = ("fsdp", "fsdp_tp", "sac", "bf16", "padding", "tied")


# ----------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class TraceConfig:
    """What to trace. `variant_config` builds the standard ones."""

    model: ModelArgs = field(default_factory=ModelArgs)
    batch_size: int = 2
    seq_len: int = 8
    # 0: 1-D FSDP over the whole world. n >= 1: FSDP x TP on a (world // n, n) mesh named
    # ("fsdp", "tp"); n == 1 keeps the TP collectives (on 1-rank groups) for world-1 numerics.
    tp_size: int = 0
    # Mixed precision: parameters all-gathered in param_dtype, gradients reduced in reduce_dtype.
    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    # Selective activation checkpointing of every transformer block.
    sac: bool = False
    # Record Python stack traces on nodes (absolute paths: keep off for fixtures).
    record_stack_traces: bool = False


def variant_config(variant: str, world_size: int, **model_overrides: Any) -> TraceConfig:
    """The fixture variants: fsdp, fsdp_tp, sac, bf16, padding, tied (docs/pytorch-bridge.md).

    fsdp_tp uses TP degree 2 when the world has at least 4 ranks (a 2 x 2 mesh at world 4), else
    a (world, 1) mesh: a 2-D graph whose TP groups have one rank.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    model_kw: dict[str, Any] = dict(model_overrides)
    cfg: dict[str, Any] = {}
    if variant == "fsdp_tp":
        cfg["tp_size"] = 2 if world_size >= 4 and world_size % 2 == 0 else 1
    elif variant == "sac":
        cfg["sac"] = True
    elif variant == "bf16":
        cfg["param_dtype"] = torch.bfloat16
        cfg["reduce_dtype"] = torch.float32
    elif variant == "padding":
        # 33 rows divide by neither 2 nor 4: tok_embeddings.weight and output.weight get padded.
        model_kw.setdefault("vocab_size", 33)
    elif variant == "tied":
        # The output projection reuses the embedding: one parameter gathered twice in forward.
        model_kw.setdefault("tie_embeddings", True)
    model = ModelArgs(**{**model_kw, "tp_size": max(cfg.get("tp_size", 0), 1)})
    return TraceConfig(model=model, **cfg)


# ----------------------------------------------------------------------------- process groups


@dataclass(frozen=True)
class MeshGroups:
    """The groups a trace uses: `fsdp` always, `tp` for a 2-D mesh."""

    fsdp: ProcessGroupSpec
    tp: ProcessGroupSpec | None
    mesh_shape: tuple[int, ...]
    mesh_dim_names: tuple[str, ...]


def init_fake_world(world_size: int, rank: int = 0) -> None:
    """(Re)initializes torch.distributed with the fake backend: collectives are shape-only."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)


def _group_spec(name: str, group: dist.ProcessGroup) -> ProcessGroupSpec:
    return ProcessGroupSpec(name=name, ranks=tuple(dist.get_process_group_ranks(group)))


def register_group_name(name: str, group: dist.ProcessGroup) -> None:
    """Makes `group` the one `_c10d_functional` collectives naming `name` run on."""
    # Collectives find groups by name in c10d's registry; re-registering a name throws.
    from torch._C._distributed_c10d import (
        _is_process_group_registered,
        _register_process_group,
        _unregister_process_group,
    )

    if _is_process_group_registered(name):
        _unregister_process_group(name)
    _register_process_group(name, group)


def setup_groups(tp_size: int) -> MeshGroups:
    """Groups for the initialized world.

    1-D: FSDP over the default group, under its own name ("0"). 2-D: a (world // tp, tp) device
    mesh; the tracing rank's two sub-groups are registered as "fsdp" and "tp" and the graph names
    those, because c10d's own sub-group names differ from rank to rank and a graph must be the
    same on every rank (the executor registers each rank's groups under these names).
    """
    world = dist.get_world_size()
    if tp_size == 0:
        world_group = dist.group.WORLD
        assert world_group is not None
        return MeshGroups(_group_spec(world_group.group_name, world_group), None, (world,), ("fsdp",))
    if world % tp_size:
        raise ValueError(f"world size {world} does not divide by tp {tp_size}")
    from torch.distributed.device_mesh import init_device_mesh

    shape = (world // tp_size, tp_size)
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("fsdp", "tp"))
    specs = []
    for dim in ("fsdp", "tp"):
        group = mesh.get_group(dim)
        register_group_name(dim, group)
        specs.append(_group_spec(dim, group))
    return MeshGroups(specs[0], specs[1], shape, ("fsdp", "tp"))


# ----------------------------------------------------------------------------- FSDP unshard


@dataclass(frozen=True)
class _UnshardSpec:
    group_name: str
    group_size: int
    dim0: int  # rows of the unsharded (TP-local) parameter
    param_dtype: torch.dtype | None
    reduce_dtype: torch.dtype | None

    @property
    def padded_dim0(self) -> int:
        return math.ceil(self.dim0 / self.group_size) * self.group_size


class _FsdpUnshard(torch.autograd.Function):
    """shard -> full parameter; the backward reduce-scatters the full gradient into a shard."""

    @staticmethod
    def forward(ctx: Any, shard: torch.Tensor, spec: _UnshardSpec) -> torch.Tensor:
        ctx.spec = spec
        ctx.shard_dtype = shard.dtype
        x = shard if spec.param_dtype is None else shard.to(spec.param_dtype)
        full = _c10d.wait_tensor(_c10d.all_gather_into_tensor(x, spec.group_size, spec.group_name))
        if spec.padded_dim0 != spec.dim0:
            full = full[: spec.dim0]
        return full

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        spec: _UnshardSpec = ctx.spec
        if spec.padded_dim0 != spec.dim0:
            pad = [0, 0] * (grad.dim() - 1) + [0, spec.padded_dim0 - spec.dim0]
            grad = torch.nn.functional.pad(grad, pad)
        if spec.reduce_dtype is not None and grad.dtype != spec.reduce_dtype:
            grad = grad.to(spec.reduce_dtype)
        shard_grad = _c10d.wait_tensor(
            _c10d.reduce_scatter_tensor(grad.contiguous(), "sum", spec.group_size, spec.group_name))
        if shard_grad.dtype != ctx.shard_dtype:
            shard_grad = shard_grad.to(ctx.shard_dtype)
        return shard_grad, None


# ----------------------------------------------------------------------------- TP activations


class _TpCopy(torch.autograd.Function):
    """Column-parallel input: identity forward, all-reduce of the input gradient backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group_name: str) -> torch.Tensor:
        ctx.group_name = group_name
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _c10d.wait_tensor(_c10d.all_reduce(grad.contiguous(), "sum", ctx.group_name)), None


class _TpReduce(torch.autograd.Function):
    """Row-parallel output: all-reduce of the partial sums forward, identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group_name: str) -> torch.Tensor:
        return _c10d.wait_tensor(_c10d.all_reduce(x.contiguous(), "sum", group_name))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def _install_tp_hooks(model: Transformer, group_name: str) -> None:
    for block in model.layers.values():
        for sub in (block.attention, block.feed_forward):
            sub.tp_enter = partial(_TpCopy.apply, group_name=group_name)
            sub.tp_exit = partial(_TpReduce.apply, group_name=group_name)


# ----------------------------------------------------------------------------- sharding layout


# TP placement of each Linear weight [out, in] of the tiny Llama: column-parallel shards out
# (dim 0), row-parallel shards in (dim 1). Everything else is replicated across TP.
_TP_COLWISE = ("attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3")
_TP_ROWWISE = ("attention.wo", "feed_forward.w2")

# Which dim of a parameter (by FQN) is TP-sharded, or None when it is replicated across TP.
TpDimFn = Callable[[str], "int | None"]


def tp_dim(fqn: str) -> int | None:
    """The tiny Llama's TP plan: the dim a parameter is TP-sharded on, None when replicated."""
    module = fqn.rsplit(".", 1)[0]
    if module.endswith(_TP_COLWISE):
        return 0
    if module.endswith(_TP_ROWWISE):
        return 1
    return None


@dataclass(frozen=True)
class ParamLayout:
    fqn: str
    full_shape: tuple[int, ...]   # the model's parameter (all TP ranks together)
    local_shape: tuple[int, ...]  # this rank's TP-local parameter, the FSDP all-gather result
    shard_shape: tuple[int, ...]  # the padded FSDP shard: a graph input
    dtype: torch.dtype = torch.float32  # the model's parameter, so its shard's
    # requires_grad of the model's parameter: a frozen one (False) is gathered for forward like
    # any other but gets no gradient output, hence no reduce-scatter and no optimizer update.
    trainable: bool = True


def param_layouts(model: nn.Module, fsdp_size: int, tp_size: int,
                  tp_dim_fn: TpDimFn = tp_dim) -> list[ParamLayout]:
    """Layouts in named_parameters() order, the order of graph inputs and gradient outputs.

    The model is built with tp_size already applied, so its parameters have TP-local shapes.
    Shards have ceil(rows / fsdp_size) rows: the last ranks' shards are (partly) zero padding
    when dim 0 does not divide by fsdp_size.
    """
    layouts = []
    for fqn, p in model.named_parameters():
        if p.dim() == 0:
            raise ValueError(f"parameter {fqn} is a scalar: SimpleFSDP shards dim 0, so give it "
                             "shape [1]")
        local = tuple(p.shape)
        full = list(local)
        dim = tp_dim_fn(fqn) if tp_size > 1 else None
        if dim is not None:
            full[dim] *= tp_size
        rows = math.ceil(local[0] / fsdp_size)
        layouts.append(ParamLayout(fqn, tuple(full), local, (rows, *local[1:]), p.dtype,
                                   p.requires_grad))
    return layouts


def shard_param(full: torch.Tensor, layout: ParamLayout, *, fsdp_rank: int, fsdp_size: int,
                tp_rank: int, tp_size: int, tp_dim_fn: TpDimFn = tp_dim) -> torch.Tensor:
    """This rank's padded FSDP shard of a full parameter (for real runs)."""
    local = full
    dim = tp_dim_fn(layout.fqn) if tp_size > 1 else None
    if dim is not None:
        local = full.chunk(tp_size, dim)[tp_rank]
    rows = layout.shard_shape[0]
    padded = torch.zeros((rows * fsdp_size, *local.shape[1:]), dtype=local.dtype)
    padded[: local.shape[0]] = local
    return padded[fsdp_rank * rows:(fsdp_rank + 1) * rows].clone()


# ----------------------------------------------------------------------------- buffers


class BufferInputs:
    """A model's buffers as graph inputs: kind "buffer", named by FQN, in named_buffers() order.

    All buffer handling of the tracer lives here: which buffers become inputs, binding the
    traced values into the modules for the traced step, and putting the originals back.
    Buffers are read (and, for BatchNorm in training mode, updated in place) by the graph; the
    ops say which (jointfx.export.buffers_to_mutate), and init_kinds() how the module set them.
    """

    def __init__(self, model: nn.Module) -> None:
        self.fqns = [name for name, _ in model.named_buffers()]
        self._slots = []
        for name in self.fqns:
            prefix, _, leaf = name.rpartition(".")
            self._slots.append((model.get_submodule(prefix), leaf))
        self._originals = [owner._buffers[leaf] for owner, leaf in self._slots]

    def __len__(self) -> int:
        return len(self.fqns)

    def example_values(self) -> list[torch.Tensor]:
        return list(self._originals)

    def input_specs(self) -> list[InputSpec]:
        return [InputSpec("buffer", b) for b in self.fqns]

    def init_kinds(self) -> dict[str, str]:
        """Graph meta "buffer_init": "zeros" or "ones" for each buffer that is constant at trace
        time, as the module constructed it (BatchNorm: running_mean 0, running_var 1,
        num_batches_tracked 0), so `jointfx exec` starts those buffers so without --params
        (docs/graph-format.md, "Buffer updates"). Other buffers are left out."""
        out: dict[str, str] = {}
        for fqn, b in zip(self.fqns, self._originals):
            if b.numel() and bool((b == 0).all()):
                out[fqn] = "zeros"
            elif b.numel() and bool((b == 1).all()):
                out[fqn] = "ones"
        return out

    def placeholder_names(self) -> list[str]:
        return [_ident(b) for b in self.fqns]

    def bind(self, values: Sequence[torch.Tensor]) -> None:
        """Makes the modules read the traced step's buffer inputs."""
        for (owner, leaf), value in zip(self._slots, values):
            owner._buffers[leaf] = value

    def restore(self) -> None:
        for (owner, leaf), value in zip(self._slots, self._originals):
            owner._buffers[leaf] = value


# ----------------------------------------------------------------------------- tracing


@dataclass
class TracedGraph:
    """A traced joint graph plus what the exporter's header needs."""

    gm: fx.GraphModule
    inputs: list[InputSpec]
    outputs: list[OutputSpec]
    process_groups: list[ProcessGroupSpec]
    graph_meta: dict[str, Any]
    layouts: list[ParamLayout]
    # The tiny-Llama configuration for traces made by trace_joint; None for jointfx.trace.
    config: TraceConfig | None = None
    buffer_fqns: list[str] = field(default_factory=list)
    user_input_names: list[str] = field(default_factory=list)
    tp_size: int = 1
    tp_dim_fn: TpDimFn = tp_dim

    def __post_init__(self) -> None:
        # The header travels with the GraphModule, as import_graph stores it, so that
        # run_pipeline(traced.gm, ...) and export_graph(traced.gm) need no specs by hand.
        placeholders = self.gm.graph.find_nodes(op="placeholder")
        if len(placeholders) != len(self.inputs):
            raise AssertionError(f"{len(placeholders)} placeholders, {len(self.inputs)} specs")
        self.gm.meta[GM_META_KEY] = {
            "process_groups": [p.to_json() for p in self.process_groups],
            "inputs": [s.to_json(n.name) for n, s in zip(placeholders, self.inputs)],
            "outputs": [s.to_json() for s in self.outputs],
            "meta": copy.deepcopy(self.graph_meta),
        }

    def export(self, *, include_stack_trace: bool = False) -> dict[str, Any]:
        from jointfx.export import export_graph

        return export_graph(self.gm, process_groups=self.process_groups, inputs=self.inputs,
                            outputs=self.outputs, graph_meta=self.graph_meta,
                            include_stack_trace=include_stack_trace)

    def real_inputs(self, full_model: nn.Module, user_inputs: Sequence[torch.Tensor], *,
                    rank: int = 0) -> list[torch.Tensor]:
        """Inputs for running the graph as `rank`: that rank's padded shards of `full_model`'s
        parameters (the unsharded, TP-free model), copies of its buffers, then `user_inputs`
        (model inputs followed by targets, as traced). Ranks are laid out as the device mesh:
        rank = fsdp_rank * tp + tp_rank."""
        if len(user_inputs) != len(self.user_input_names):
            raise ValueError(f"{len(user_inputs)} user inputs, the graph takes "
                             f"{len(self.user_input_names)} ({', '.join(self.user_input_names)})")
        tp = max(self.tp_size, 1)
        fsdp_size = self.process_groups[0].size
        params = dict(full_model.named_parameters())
        shards = [shard_param(params[lay.fqn].detach(), lay, fsdp_rank=rank // tp,
                              fsdp_size=fsdp_size, tp_rank=rank % tp, tp_size=tp,
                              tp_dim_fn=self.tp_dim_fn)
                  for lay in self.layouts]
        named = dict(full_model.named_buffers())
        buffers = [named[b].detach().clone() for b in self.buffer_fqns]
        return [*shards, *buffers, *user_inputs]


def _sac_policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    # torchtitan-style op-level SAC: keep matmuls and attention, recompute the cheap rest.
    if func in _SAC_SAVE_OPS:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


_SAC_SAVE_OPS = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
}


def _sac_context(ac_graph_id: int) -> tuple[Any, Any]:
    # Under make_fx every output in a region is cached for the recompute, which reads it back
    # instead of tracing the op again. An in-place op on a value made in the region (nn.RMSNorm's
    # decomposition adds eps to the mean in place) bumps that cached tensor's version, which
    # torch.utils.checkpoint's check reads as the cache going stale and refuses the trace; the
    # graph recorded is the same either way (the recompute adds no node), so the check is off.
    fwd, recompute = create_selective_checkpoint_contexts(_sac_policy,
                                                          allow_cache_entry_mutation=True)
    # checkpoint() only numbers regions when Dynamo drives it; number them ourselves (1-based
    # block index) so every tagged node says which region it belongs to.
    fwd.ac_graph_id = ac_graph_id
    return fwd, recompute


_SAC_META_KEYS = ("recompute", "ac_graph_id")


@contextlib.contextmanager
def _scoped_sac_meta() -> Iterator[None]:
    """Confines SAC's node tags to its region.

    SAC's dispatch mode writes recompute/ac_graph_id into FX's global tracing meta and never
    takes them out (under Dynamo the checkpoint HOP scopes them), so without this every node
    after the last region (final norm, output, loss, all of backward) would carry that region's
    tags.
    """
    meta = fx_traceback.current_meta
    saved = {k: meta[k] for k in _SAC_META_KEYS if k in meta}
    try:
        yield
    finally:
        meta = fx_traceback.current_meta
        for k in _SAC_META_KEYS:
            meta.pop(k, None)
        meta.update(saved)


@contextlib.contextmanager
def _apply_sac(modules: Sequence[nn.Module],
               inside: Callable[[nn.Module], contextlib.AbstractContextManager[None]]
               ) -> Iterator[None]:
    """Runs each module's forward under selective activation checkpointing (ac_graph_id =
    position + 1) while the context is open; `inside(module)` is entered within the region, in
    forward and in the recompute alike."""
    for index, block in enumerate(modules):
        inner = block.forward

        def region(*args: Any, _inner: Callable[..., Any] = inner, _block: nn.Module = block,
                   **kwargs: Any) -> Any:
            with inside(_block):
                return _inner(*args, **kwargs)

        def checkpointed(*args: Any, _region: Callable[..., Any] = region,
                         _id: int = index + 1, **kwargs: Any) -> Any:
            with _scoped_sac_meta():
                return checkpoint(_region, *args, use_reentrant=False,
                                  context_fn=partial(_sac_context, _id), **kwargs)

        # An instance attribute: Module.__call__ still runs the block's hooks around it, so the
        # block's own module_fqn annotation wraps the checkpointed region.
        block.forward = checkpointed  # type: ignore[method-assign]
    try:
        yield
    finally:
        for block in modules:
            block.__dict__.pop("forward", None)


class _ModuleHooks:
    """Per-module forward hooks: annotate module_fqn and swap in all-gathered parameters.

    A module's own parameters are all-gathered when the module is called (the root's too, with
    no annotation). A parameter read while its owner is not running (nn.MultiheadAttention reads
    `self.out_proj.weight` without calling `out_proj`) is all-gathered at the read: each module
    with parameters gets a subclass whose parameter names are properties (SimpleFSDP reads every
    parameter through such an accessor), so no read ever sees the full, unsharded Parameter.
    """

    def __init__(self, model: nn.Module, unshard: Callable[[str], torch.Tensor],
                 checkpointed: Sequence[nn.Module] = ()) -> None:
        self._unshard = unshard
        # A checkpointed module's own parameters are gathered inside its checkpointed region
        # (own_gathered, which _apply_sac runs there): gathered by the pre-hook, they would be an
        # input of the region in forward, but its recompute in backward reads the parameters
        # again and gathers there, an op the forward never ran in the region
        # (torch.utils.checkpoint refuses the step).
        self._gathered_in_region = {id(m) for m in checkpointed}
        # The nodes each gather-on-read traced (cast, all-gather, wait, slice), so that a read
        # whose value the step never uses can be taken out again (drop_unused_reads).
        self.read_chains: list[list[fx.Node]] = []
        self._saved: list[tuple[nn.Module, str, Any]] = []
        canonical = {id(p): fqn for fqn, p in model.named_parameters()}
        self._owned: dict[nn.Module, list[tuple[str, str]]] = {}
        self._handles = []
        self._classes: list[tuple[nn.Module, type]] = []
        for name, module in model.named_modules():
            own = [(pname, canonical[id(p)]) for pname, p in module._parameters.items()
                   if p is not None]
            self._owned[module] = own
            if own:
                self._gather_on_read(module, own)
            if not name and not own:
                continue  # a root without parameters of its own needs no hooks
            self._handles.append(module.register_forward_pre_hook(partial(self._pre, name)))
            self._handles.append(module.register_forward_hook(self._post, always_call=True))

    def _gather_on_read(self, module: nn.Module, own: list[tuple[str, str]]) -> None:
        unshard = self._unshard
        read_chains = self.read_chains

        def accessor(pname: str, param_fqn: str) -> property:
            def read(m: nn.Module) -> Any:
                value = m._parameters[pname]
                # Inside the owner's forward `_pre` has put the gathered tensor there.
                if not isinstance(value, nn.Parameter):
                    return value
                gathered, nodes = _recording_nodes(partial(unshard, param_fqn))
                read_chains.append(nodes)
                return gathered
            return property(read)

        cls = type(module)
        # Same name and module, so traced meta (nn_module_stack) reads as the original class.
        namespace: dict[str, Any] = {"__module__": cls.__module__,
                                     "__qualname__": cls.__qualname__}
        namespace.update({pname: accessor(pname, fqn) for pname, fqn in own})
        module.__class__ = type(cls.__name__, (cls,), namespace)
        self._classes.append((module, cls))

    def _pre(self, fqn: str, module: nn.Module, args: Any) -> None:
        # Nodes outside every submodule (the root) carry no module_fqn.
        ctx = fx_traceback.annotate({"module_fqn": fqn}) if fqn else contextlib.nullcontext()
        ctx.__enter__()
        self._saved.append((module, "", ctx))
        if id(module) in self._gathered_in_region:
            return
        for pname, param_fqn in self._owned[module]:
            # Swapping a plain tensor into _parameters (as torch.func.functional_call does)
            # lets the unmodified module code read the gathered parameter.
            self._saved.append((module, pname, module._parameters[pname]))
            module._parameters[pname] = self._unshard(param_fqn)  # type: ignore[assignment]

    @contextlib.contextmanager
    def own_gathered(self, module: nn.Module) -> Iterator[None]:
        """`module`'s own parameters gathered while the context is open: a checkpointed
        module's, inside its region (once per call, as the pre-hook does for the others)."""
        saved = [(pname, module._parameters[pname]) for pname, _ in self._owned.get(module, [])]
        try:
            for pname, param_fqn in self._owned.get(module, []):
                module._parameters[pname] = self._unshard(param_fqn)  # type: ignore[assignment]
            yield
        finally:
            for pname, value in saved:
                module._parameters[pname] = value

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        # Undo in reverse up to and including this module's annotation.
        while self._saved:
            owner, pname, saved = self._saved.pop()
            if pname:
                owner._parameters[pname] = saved
            else:
                saved.__exit__(None, None, None)
                break

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        for module, cls in reversed(self._classes):
            module.__class__ = cls
        self._classes.clear()
        # A failed forward leaves gathered tensors in place: put the parameters back.
        while self._saved:
            owner, pname, saved = self._saved.pop()
            if pname:
                owner._parameters[pname] = saved
            else:
                saved.__exit__(None, None, None)


def _recording_nodes(fn: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, list[fx.Node]]:
    """fn() and the nodes make_fx recorded while it ran (none outside make_fx)."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    mode = get_proxy_mode()
    if mode is None:
        return fn(), []
    graph: fx.Graph = mode.tracer.graph
    last = next(iter(reversed(graph.nodes)), None)
    result = fn()
    node = last.next if last is not None else next(iter(graph.nodes), None)
    nodes = []
    while node is not None and node.op != "root":  # the list's sentinel closes it
        nodes.append(node)
        node = node.next
    return result, nodes


def drop_unused_reads(graph: fx.Graph, chains: Sequence[Sequence[fx.Node]]) -> int:
    """Erases the gathers of parameter reads whose value nothing in the graph uses.

    A read like T5's `self.wo.weight.dtype` check, or `.shape`, `.device`, `.requires_grad`,
    looks at metadata only: under make_fx that records no node, so the read's whole chain (cast,
    all-gather, wait, slice) is left without users. Only the nodes a gather-on-read itself
    traced are candidates, from the last back, so a collective the model or loss wrote is never
    taken out, used or not. Returns the number of chains erased."""
    alive = set(graph.nodes)
    erased = 0
    for chain in chains:
        nodes = [n for n in chain if n in alive]
        if not nodes or nodes[-1].users:
            continue
        for node in reversed(nodes):
            if node.users:
                break
            graph.erase_node(node)
            alive.discard(node)
        erased += 1
    return erased


def _install_backward_meta_hooks(loss: torch.Tensor) -> None:
    """Makes backward nodes carry the seq_nr of the autograd Node (forward op) they come from.

    AOTAutograd does this for torch.compile; a plain make_fx does not, so without it every
    backward node would get the seq_nr of the last forward op.
    """
    seen: set[Any] = set()
    stack = [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        seq = fn._sequence_nr()
        fn.register_prehook(lambda grads, seq=seq: fx_traceback.set_grad_fn_seq_nr(seq))
        fn.register_hook(lambda grad_in, grad_out: fx_traceback.reset_grad_fn_seq_nr())
        stack.extend(next_fn for next_fn, _ in fn.next_functions)


# What a loss function (or a model without one) returns: the loss, or the loss and auxiliary
# losses (an MoE's load-balancing loss), all scalars; the graph's loss output is their sum.
LossResult = Any
LossFn = Callable[..., LossResult]


def _total_loss(result: LossResult, *, model_output: bool = False) -> tuple[torch.Tensor, int]:
    """(loss + every auxiliary loss, number of auxiliary losses). `model_output`: `result` is
    the model's own output (loss_fn=None), which may also be a mapping with a "loss" entry."""
    if isinstance(result, torch.Tensor):
        parts = [result]
    elif isinstance(result, (tuple, list)) and result and all(
            isinstance(r, torch.Tensor) for r in result):
        parts = list(result)
    elif (model_output and isinstance(result, Mapping)
          and isinstance(result.get("loss"), torch.Tensor)):
        # A Hugging Face model called with labels= returns a ModelOutput (a dict) whose "loss"
        # already includes any auxiliary loss the model adds.
        parts = [result["loss"]]
    elif model_output:
        raise TypeError("with loss_fn=None the model must return a scalar tensor, a tuple "
                        "(loss, *aux) of scalar tensors or a mapping with the loss under "
                        f"\"loss\" (a Hugging Face ModelOutput), got {type(result).__name__}")
    else:
        raise TypeError("the loss function must return a scalar tensor or a tuple (loss, *aux) "
                        f"of scalar tensors, got {type(result).__name__}")
    for i, part in enumerate(parts):
        if part.dim() != 0 or not part.is_floating_point():
            what = "loss" if i == 0 else f"auxiliary loss {i}"
            raise ValueError(f"{what} must be a floating-point scalar, got shape "
                             f"{list(part.shape)} dtype {part.dtype}")
    total = parts[0]
    for aux in parts[1:]:
        total = total + aux
    return total, len(parts) - 1


def _as_tensor_list(value: torch.Tensor | Sequence[torch.Tensor], what: str) -> list[torch.Tensor]:
    items = [value] if isinstance(value, torch.Tensor) else list(value)
    for i, t in enumerate(items):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}[{i}] is a {type(t).__name__}, expected a tensor")
    return items


# What example_inputs / targets may be: a tensor, a sequence of tensors (positional arguments),
# a mapping of keyword arguments, or a pair (positional sequence, keyword mapping).
CallArgs = Any


@dataclass(frozen=True)
class _Call:
    """One call's tensors, positional ones first; the last len(keywords) are passed by name."""

    tensors: list[torch.Tensor]
    keywords: list[str]

    @property
    def n_positional(self) -> int:
        return len(self.tensors) - len(self.keywords)

    def apply(self, fn: Callable[..., Any], prefix: Sequence[Any],
              values: Sequence[torch.Tensor]) -> Any:
        """fn(*prefix, *positional, **keyword), `values` standing for this call's tensors."""
        n = self.n_positional
        return fn(*prefix, *values[:n], **dict(zip(self.keywords, values[n:])))

    def default_names(self, prefix: str) -> list[str]:
        return _default_names(prefix, self.n_positional) + list(self.keywords)


def _call_args(value: CallArgs, what: str) -> _Call:
    if isinstance(value, torch.Tensor):
        return _Call([value], [])
    if isinstance(value, Mapping):
        args, kwargs = (), value
    elif (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], Mapping)
          and not isinstance(value[0], (torch.Tensor, Mapping))):
        args, kwargs = value
    elif isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        args, kwargs = value, {}
    else:
        raise TypeError(f"{what} is a {type(value).__name__}: expected a tensor, a sequence of "
                        "tensors, a mapping of keyword arguments to tensors, or a pair (tensors, "
                        "mapping)")
    tensors = _as_tensor_list(args, what)
    for key, t in kwargs.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise TypeError(f"{what} key {key!r} is not a keyword argument name")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}[{key!r}] is a {type(t).__name__}, expected a tensor")
    return _Call(tensors + list(kwargs.values()), list(kwargs))


def _default_names(prefix: str, n: int) -> list[str]:
    return [prefix] if n == 1 else [f"{prefix}_{i}" for i in range(n)]


def _ensure_world(world_size: int | None, rank: int) -> None:
    if world_size is None:
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized: pass world_size= to trace "
                               "on a fake process group")
        return
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not dist.is_initialized():
        init_fake_world(world_size, rank)
    elif dist.get_world_size() != world_size:
        if dist.get_backend() != "fake":
            raise ValueError(f"torch.distributed is initialized with {dist.get_world_size()} "
                             f"ranks, not {world_size}")
        init_fake_world(world_size, rank)


def _dtype_name(dtype: torch.dtype | None) -> str | None:
    return str(dtype).removeprefix("torch.") if dtype is not None else None


def _tensor_meta(name: str, t: torch.Tensor) -> dict[str, Any]:
    return {"dtype": _dtype_name(t.dtype), "name": name, "shape": list(t.shape)}


def describe_model(model: nn.Module, layouts: Sequence[ParamLayout], buffers: BufferInputs,
                   user_inputs: Sequence[tuple[str, torch.Tensor]], *, n_model_inputs: int,
                   aux_losses: int,
                   param_dtype: torch.dtype | None, reduce_dtype: torch.dtype | None,
                   tp_size: int, sac: bool, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Graph meta "model": what was traced (docs/pytorch-bridge.md, "jointfx.trace")."""
    meta: dict[str, Any] = {
        "class": type(model).__qualname__,
        "module": type(model).__module__,
        "parameters": len(layouts),
        "parameter_numel": sum(math.prod(lay.full_shape) for lay in layouts),
        "buffers": len(buffers),
        "inputs": [_tensor_meta(name, t) for name, t in user_inputs[:n_model_inputs]],
        "targets": [_tensor_meta(name, t) for name, t in user_inputs[n_model_inputs:]],
        "aux_losses": aux_losses,
        "param_dtype": _dtype_name(param_dtype),
        "reduce_dtype": _dtype_name(reduce_dtype),
        "sac": sac,
        "tp_size": tp_size,
        "training": model.training,
    }
    if frozen := [lay.fqn for lay in layouts if not lay.trainable]:
        meta["frozen_parameters"] = frozen
    if config:
        meta["config"] = dict(config)
    return meta


def trace(
    model: nn.Module,
    loss_fn: LossFn | None,
    example_inputs: CallArgs,
    targets: CallArgs = (),
    *,
    world_size: int | None = None,
    rank: int = 0,
    tp_size: int = 0,
    tp_dim: TpDimFn | None = None,
    tp_setup: Callable[[nn.Module, str], None] | None = None,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = None,
    cast_forward_inputs: bool = True,
    checkpoint_modules: Sequence[nn.Module] = (),
    input_names: Sequence[str] | None = None,
    target_names: Sequence[str] | None = None,
    config: Mapping[str, Any] | None = None,
    model_meta: Mapping[str, Any] | None = None,
    record_stack_traces: bool = False,
) -> TracedGraph:
    """Traces one SimpleFSDP training step of any module: [loss, *grads] as a joint graph.

    model: any nn.Module, its parameters the full (TP-local when tp_size > 1) ones; it is traced
      in its current train/eval mode and left as it was.
    loss_fn(model(*example_inputs), *targets): a scalar loss, or a tuple (loss, *aux) whose sum
      is the graph's loss output (auxiliary losses are kept, never dropped). None: the model's
      output itself is the loss, such a tuple, or a mapping with the loss under "loss" (a
      Hugging Face ModelOutput of a model given labels=).
    example_inputs, targets: a tensor, a sequence of tensors (positional arguments), a mapping of
      keyword arguments to tensors (`model(**example_inputs)`, `loss_fn(out, **targets)`), or a
      pair (sequence, mapping) of both; tensors of any dtype and shape. Graph inputs of kind
      user_input in that order (positional, then keyword in the mapping's order), named
      input_names / target_names (default inputs[_i], targets[_i] for positional ones, the key
      for keyword ones).
    world_size: trace on a fake process group of this many ranks (as `rank`); None: on the
      initialized torch.distributed world.
    tp_size: 0 for 1-D FSDP; n >= 1 for a (world // n, n) ("fsdp", "tp") mesh, with tp_dim(fqn)
      giving each parameter's TP-sharded dim and tp_setup(model, "tp") installing the model's
      activation collectives.
    param_dtype / reduce_dtype: mixed precision: parameters cast before the all-gather, gradients
      cast before the reduce-scatter (and back to the shard's dtype after). With param_dtype,
      floating-point model inputs are cast to it too unless cast_forward_inputs=False (FSDP2's
      MixedPrecisionPolicy does the same); targets are left alone.
    checkpoint_modules: modules run under selective activation checkpointing.
    config: plain-JSON model settings recorded in graph meta under model.config.
    model_meta: replaces the generated graph meta "model" entirely.
    """
    _ensure_world(world_size, rank)
    if tp_size and (tp_dim is None or tp_setup is None):
        raise ValueError("tp_size needs tp_dim (which dim each parameter is TP-sharded on) and "
                         "tp_setup (the activation collectives)")
    tp_dim_fn: TpDimFn = tp_dim if tp_dim is not None else (lambda fqn: None)
    in_call = _call_args(example_inputs, "example_inputs")
    tgt_call = _call_args(targets, "targets")
    inputs, target_list = in_call.tensors, tgt_call.tensors
    in_names = (list(input_names) if input_names is not None
                else in_call.default_names("inputs"))
    tgt_names = (list(target_names) if target_names is not None
                 else tgt_call.default_names("targets"))
    if len(in_names) != len(inputs) or len(tgt_names) != len(target_list):
        raise ValueError("input_names/target_names must name every input/target")

    groups = setup_groups(tp_size)
    fsdp_size = groups.fsdp.size
    layouts = param_layouts(model, fsdp_size, max(tp_size, 1), tp_dim_fn)
    if not layouts:
        raise ValueError(f"{type(model).__name__} has no parameters to shard")
    trained = [i for i, lay in enumerate(layouts) if lay.trainable]
    if not trained:
        raise ValueError(f"{type(model).__name__} has no trainable parameter (every one has "
                         "requires_grad=False): a training step would compute no gradient")
    if groups.tp is not None:
        assert tp_setup is not None
        tp_setup(model, groups.tp.name)
    specs = {lay.fqn: _UnshardSpec(groups.fsdp.name, fsdp_size, lay.local_shape[0],
                                   param_dtype, reduce_dtype) for lay in layouts}
    buffers = BufferInputs(model)
    n_params, n_buffers = len(layouts), len(buffers)
    current: dict[str, torch.Tensor] = {}
    # FakeTensorMode's dispatch cache is process-wide: an entry an earlier trace left can hand an
    # op's outputs back aliased otherwise than a fresh run (nn.LSTM's two equal bias gradients
    # under SAC: which getitem a reduce-scatter read depended on what was traced before). Every
    # trace starts from an empty cache, so a graph does not depend on its process's history.
    from torch._subclasses.fake_tensor import FakeTensorMode
    FakeTensorMode.cache_clear()
    hooks = _ModuleHooks(model, lambda fqn: _FsdpUnshard.apply(current[fqn], specs[fqn]),
                         checkpointed=checkpoint_modules)

    seq_base: list[int] = []
    aux_count: list[int] = []

    def step(*flat: torch.Tensor) -> list[torch.Tensor]:
        # Nodes recorded before this point (the placeholders) belong to no autograd Node of
        # this trace; their seq_nr is whatever the per-thread counter held.
        seq_base.append(torch.autograd._get_sequence_nr())
        shards = flat[:n_params]
        current.update({lay.fqn: s for lay, s in zip(layouts, shards)})
        buffers.bind(flat[n_params:n_params + n_buffers])
        user = flat[n_params + n_buffers:]
        model_inputs = user[:len(inputs)]
        if param_dtype is not None and cast_forward_inputs:
            # As FSDP2's MixedPrecisionPolicy(cast_forward_inputs=True): floating-point model
            # inputs meet the parameters in param_dtype.
            model_inputs = tuple(x.to(param_dtype) if x.is_floating_point() else x
                                 for x in model_inputs)
        out = in_call.apply(model, (), model_inputs)
        with fx_traceback.annotate({"module_fqn": "loss"}):
            result = (tgt_call.apply(loss_fn, (out,), user[len(inputs):]) if loss_fn is not None
                      else out)
            loss, n_aux = _total_loss(result, model_output=loss_fn is None)
        aux_count.append(n_aux)
        _install_backward_meta_hooks(loss)
        # Gradients of the trainable shards only: a frozen one never meets autograd, so its
        # gather has no backward (no reduce-scatter) and the graph no output for it.
        wrt = [shards[i] for i in trained]
        with fx_traceback._set_autograd_backward():
            grads = torch.autograd.grad(loss, wrt, allow_unused=True)
        # A parameter the step never reads gets a zero gradient, so every trainable shard has one.
        grads = tuple(g if g is not None else torch.zeros_like(s) for g, s in zip(grads, wrt))
        return [loss, *grads]

    # Values do not matter under tracing_mode="fake"; only shapes and dtypes do.
    # Shards in their parameter's dtype: a float64 or bf16 parameter gathered as float32 would
    # trace another program than the model's.
    shard_examples = [torch.zeros(lay.shard_shape, dtype=lay.dtype, requires_grad=lay.trainable)
                      for lay in layouts]
    example = [*shard_examples, *buffers.example_values(), *inputs, *target_list]
    try:
        with fx_traceback.preserve_node_meta(), _apply_sac(list(checkpoint_modules),
                                                            hooks.own_gathered):
            gm = make_fx(step, tracing_mode="fake",
                         record_stack_traces=record_stack_traces)(*example)
    except RuntimeError as e:
        from torch._subclasses.fake_tensor import DataDependentOutputException
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

        if isinstance(e, (GuardOnDataDependentSymNode, DataDependentOutputException)):
            raise ValueError(
                "the step's control flow depends on a tensor's value (`if x.sum() > 0:`, "
                "`int(t.item())`, `t.tolist()` in a condition), which a trace cannot follow: "
                "jointfx.trace runs the step on fake tensors, which have shapes and dtypes but "
                "no values. Compute both sides and select with torch.where or mask arithmetic, "
                "use torch.cond, or make the decision outside the step and trace once per "
                "outcome (docs/pytorch-bridge.md, \"Data-dependent control flow\"); torch "
                f"said: {str(e).splitlines()[0]}") from e
        if "_FsdpUnshard" in str(e) and "modified inplace" in str(e):
            raise ValueError(
                "the model modifies a parameter in place in forward (nn.Embedding(max_norm=...) "
                "renormalizes its weight, for one): under SimpleFSDP that is the gathered copy, a "
                "view of the padded gather at this world size, which autograd cannot let change; "
                "and the change would never reach the parameter's shard") from e
        raise
    except AssertionError as e:
        # FakeTensorMode meeting a real tensor: a full Parameter reached an op. The hooks hand
        # out gathered values for `module.<name>` reads; `model.parameters()`,
        # `named_parameters()` or `state_dict()` return the Parameters themselves.
        if "convert all Tensors to FakeTensors" in str(e) and "Parameter containing" in str(e):
            raise ValueError(
                "the step read a parameter through model.parameters(), named_parameters() or "
                "state_dict() (an L2 term in the loss, for one): under SimpleFSDP a parameter is "
                "its shard, and only a read as its module's attribute (module.weight) is "
                "all-gathered into the full value; read it as an attribute in the loss or model, "
                "or leave the term to the optimizer (AdamW's weight_decay)") from e
        raise
    finally:
        hooks.remove()
        buffers.restore()
    drop_unused_reads(gm.graph, hooks.read_chains)
    placeholder_names = ([_ident(lay.fqn) for lay in layouts] + buffers.placeholder_names()
                         + in_names + tgt_names)
    gm = _rename_placeholders(gm, placeholder_names, in_names + tgt_names)
    _normalize_meta(gm.graph, seq_base[0])
    _warn_parameter_mutations(gm, [lay.fqn for lay in layouts])

    in_specs = ([InputSpec("parameter", lay.fqn) for lay in layouts] + buffers.input_specs()
                + [InputSpec("user_input")] * (len(inputs) + len(target_list)))
    outputs = [OutputSpec("loss")] + [OutputSpec("gradient", lay.fqn) for lay in layouts
                                       if lay.trainable]
    pgs = [groups.fsdp] + ([groups.tp] if groups.tp is not None else [])
    if model_meta is None:
        user = list(zip(in_names + tgt_names, inputs + target_list))
        model_meta = describe_model(model, layouts, buffers, user, n_model_inputs=len(inputs),
                                    aux_losses=aux_count[0],
                                    param_dtype=param_dtype, reduce_dtype=reduce_dtype,
                                    tp_size=tp_size, sac=bool(checkpoint_modules), config=config)
    graph_meta: dict[str, Any] = {
        "world_size": dist.get_world_size(),
        "mesh": {"dim_names": list(groups.mesh_dim_names), "shape": list(groups.mesh_shape)},
        "model": dict(model_meta),
        "traced_rank": dist.get_rank(),
    }
    if init_kinds := buffers.init_kinds():
        graph_meta["buffer_init"] = init_kinds
    return TracedGraph(gm, in_specs, outputs, pgs, graph_meta, layouts, None,
                       buffer_fqns=list(buffers.fqns), user_input_names=in_names + tgt_names,
                       tp_size=max(tp_size, 1), tp_dim_fn=tp_dim_fn)


def _mutated_args(node: fx.Node) -> list[Any]:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    out = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            out.append(node.args[i] if i < len(node.args) else node.kwargs.get(a.name))
    return out


def _is_view(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return (schema is not None and bool(schema.returns) and schema.returns[0].alias_info is not None
            and not schema.returns[0].alias_info.is_write)


def _warn_parameter_mutations(gm: fx.GraphModule, fqns: Sequence[str]) -> None:
    """Warns about each parameter the traced step modifies in place (through its gather,
    casts and views): the graph changes the gathered copy only, as FSDP2 does, where eager
    training would change the parameter itself."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    param_of: dict[fx.Node, str] = dict(zip(placeholders, fqns))
    gathered = {"all_gather_into_tensor", "wait_tensor", "_to_copy", "convert_element_type"}
    found: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        first = node.args[0] if node.args and isinstance(node.args[0], fx.Node) else None
        name = getattr(getattr(node.target, "_schema", None), "name", "").split("::")[-1]
        if first in param_of and (name in gathered or _is_view(node)):
            param_of[node] = param_of[first]
        for arg in _mutated_args(node):
            if isinstance(arg, fx.Node) and arg in param_of:
                found.setdefault(param_of[arg], str(node.target))
    for fqn, op in found.items():
        warnings.warn(f"jointfx.trace: parameter {fqn} is modified in place in forward ({op}): the "
                      "graph changes its gathered copy, not its shard (as FSDP2 does); eager "
                      "training would change the parameter itself", stacklevel=3)


# ----------------------------------------------------------------------------- the tiny Llama


def build_model(cfg: TraceConfig, *, seed: int = 0) -> Transformer:
    with torch.device("cpu"):
        model = Transformer(cfg.model)
    init_weights(model, seed)
    return model


def trace_joint(cfg: TraceConfig, model: Transformer | None = None) -> TracedGraph:
    """Traces [loss, *grads] of one tiny-Llama training step on the current torch.distributed
    world: jointfx.trace with the Llama's loss, TP plan, SAC blocks and graph meta."""
    model = model if model is not None else build_model(cfg)
    tokens = torch.zeros(cfg.batch_size, cfg.seq_len, dtype=torch.long)
    traced = trace(
        model, cross_entropy_loss, [tokens], [tokens.clone()],
        tp_size=cfg.tp_size, tp_dim=tp_dim, tp_setup=_install_tp_hooks,
        param_dtype=cfg.param_dtype, reduce_dtype=cfg.reduce_dtype,
        checkpoint_modules=list(model.layers.values()) if cfg.sac else (),
        input_names=["tokens"], target_names=["labels"], model_meta=_model_meta(cfg),
        record_stack_traces=cfg.record_stack_traces)
    traced.config = cfg
    return traced


def _ident(fqn: str) -> str:
    """A placeholder name for an FQN: dots become underscores ("layers_0_attention_wq_weight"),
    and a name that would start with a digit (an nn.Sequential's "0.weight") gets a leading
    underscore, so that the name is a Python identifier as FX's generated code needs."""
    name = re.sub(r"\W", "_", fqn)
    return f"_{name}" if name[:1].isdigit() else name


def _model_meta(cfg: TraceConfig) -> dict[str, Any]:
    m = cfg.model
    return {
        "batch_size": cfg.batch_size, "dim": m.dim, "ffn_hidden_dim": m.ffn_hidden_dim,
        "n_heads": m.n_heads, "n_kv_heads": m.n_kv_heads, "n_layers": m.n_layers,
        "param_dtype": str(cfg.param_dtype).removeprefix("torch.") if cfg.param_dtype else None,
        "reduce_dtype": str(cfg.reduce_dtype).removeprefix("torch.") if cfg.reduce_dtype else None,
        "sac": cfg.sac, "seq_len": cfg.seq_len, "tie_embeddings": m.tie_embeddings,
        "tp_size": cfg.tp_size, "vocab_size": m.vocab_size,
    }


def real_inputs(traced: TracedGraph, *, seed: int = 0, rank: int = 0) -> list[torch.Tensor]:
    """Real input tensors for running a traced tiny-Llama graph as `rank` (see make_real_inputs)."""
    if traced.config is None:
        raise ValueError("real_inputs is for tiny-Llama traces; use TracedGraph.real_inputs")
    return make_real_inputs(traced.config, traced.layouts, fsdp_size=traced.process_groups[0].size,
                            seed=seed, rank=rank)


def make_real_inputs(cfg: TraceConfig, layouts: Sequence[ParamLayout], *, fsdp_size: int,
                     seed: int = 0, rank: int = 0) -> list[torch.Tensor]:
    """This rank's shards of the seeded full (unsharded, TP-free) model's weights, the buffers,
    and seeded tokens/labels (the same on every rank). Ranks are laid out as the device mesh:
    rank = fsdp_rank * tp + tp_rank."""
    full_model = build_model(replace(cfg, model=replace(cfg.model, tp_size=1)), seed=seed)
    tp = max(cfg.tp_size, 1)
    tp_rank, fsdp_rank = rank % tp, rank // tp
    full_params = dict(full_model.named_parameters())
    shards = [shard_param(full_params[lay.fqn].detach(), lay, fsdp_rank=fsdp_rank,
                          fsdp_size=fsdp_size, tp_rank=tp_rank, tp_size=tp)
              for lay in layouts]
    buffers = [b.clone() for _, b in full_model.named_buffers()]
    gen = torch.Generator().manual_seed(seed + 1)
    shape = (cfg.batch_size, cfg.seq_len)
    tokens = torch.randint(0, cfg.model.vocab_size, shape, generator=gen)
    labels = torch.randint(0, cfg.model.vocab_size, shape, generator=gen)
    return [*shards, *buffers, tokens, labels]


# ----------------------------------------------------------------------------- post-processing


def _rename_placeholders(gm: fx.GraphModule, names: Sequence[str],
                         node_names_exact: Sequence[str] = ()) -> fx.GraphModule:
    """Copies the graph with placeholders named after what they are (FQN-based).

    FX turns a name into its own form (snake_case: "LayerNorm" -> "layer_norm", a suffix on
    a duplicate or a builtin such as "input"); that is fine for parameters and buffers, whose
    input specs carry the FQN, but the names in `node_names_exact` (the user inputs the caller
    named) must come out as given.
    """
    old = gm.graph
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    placeholders = [n for n in old.nodes if n.op == "placeholder"]
    if len(placeholders) != len(names):
        raise AssertionError(f"{len(placeholders)} placeholders, {len(names)} names")
    for node, name in zip(placeholders, names):
        env[node] = new.placeholder(name)
        if node_names_exact and env[node].name != name and name in node_names_exact:
            raise ValueError(f"graph input {name!r} would be named {env[node].name!r} by FX (a "
                             "duplicate, reserved or not snake_case name): pass other "
                             "input_names/target_names")
        env[node].meta = dict(node.meta)
    for node in old.nodes:
        if node.op != "placeholder":
            env[node] = new.node_copy(node, lambda n: env[n])
    return fx.GraphModule(gm, new)


def _normalize_meta(graph: fx.Graph, seq_base: int) -> None:
    """Makes node meta independent of process history and complete for backward nodes.

    * seq_nr comes from a per-thread counter that keeps growing across traces; values below
      `seq_base` (the counter when the traced function started) become -1, "no autograd node",
      and the rest are renumbered 0, 1, ... in ascending order, so fixtures are byte-identical
      however many traces ran before in the process.
    * Backward nodes inherit meta["custom"] (module_fqn) from the first forward node with the same
      seq_nr, as torchtitan's _copy_fwd_metadata_to_bw_nodes does, so per-module bucketing works
      in backward too.
    """
    values = sorted({n.meta["seq_nr"] for n in graph.nodes
                     if isinstance(n.meta.get("seq_nr"), int) and n.meta["seq_nr"] >= seq_base})
    renumber = {v: i for i, v in enumerate(values)}
    first_forward: dict[int, fx.Node] = {}
    for node in graph.nodes:
        seq = node.meta.get("seq_nr")
        if isinstance(seq, int):
            node.meta["seq_nr"] = renumber.get(seq, -1)
        if not node.meta.get("autograd_backward") and isinstance(node.meta.get("seq_nr"), int):
            first_forward.setdefault(node.meta["seq_nr"], node)
    for node in graph.nodes:
        if node.meta.get("autograd_backward") and "custom" not in node.meta:
            fwd = first_forward.get(node.meta.get("seq_nr", -1))
            if fwd is not None and "custom" in fwd.meta:
                node.meta["custom"] = dict(fwd.meta["custom"])


def trace_variant(variant: str, world_size: int, **model_overrides: Any) -> TracedGraph:
    """Initializes a fake world of `world_size` ranks (rank 0) and traces one variant."""
    init_fake_world(world_size)
    return trace_joint(variant_config(variant, world_size, **model_overrides))


class _CallableModule(types.ModuleType):
    """`jointfx.trace` is this module (its other names are public too) and calls trace()."""

    def __call__(self, *args: Any, **kwargs: Any) -> TracedGraph:
        return trace(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
