"""torch.fx <-> jointfx JSON interchange format, version 1 (docs/graph-format.md).

export_graph(gm, ...) -> dict       every node, typed args, tensor meta, typed node meta, phase
import_graph(doc) -> GraphModule    the same nodes, names, targets, args, kwargs and meta
dumps_graph(doc) -> str             canonical JSON text (what the C++ writer emits)
grad_mode(gm)                       the grad mode to run a joint graph in (torch.no_grad or not)

docs/pytorch-bridge.md says which FX meta keys are kept, dropped or derived, and the phase rules.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import json
import math
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import fx

FORMAT = "jointfx.graph"
VERSION = 1

InputKind = Literal["parameter", "buffer", "user_input", "mesh", "opaque", "none"]
OutputKind = Literal["loss", "gradient", "buffer_mutation", "other", "mesh", "opaque"]
Phase = Literal["forward", "loss", "backward"]
PHASES = ("forward", "loss", "backward")

# Header keys in canonical order (docs/graph-format.md).
_HEADER_KEYS = ("format", "version", "process_groups", "inputs", "outputs", "constants", "meta")

# Node meta keys handled by name; everything else goes through _extra_meta.
_TYPED_META = ("val", "phase", "recompute", "ac_graph_id", "seq_nr", "stack_trace", "custom")
# FX meta keys never written: objects with no JSON form, or restatements of what is written.
#   tensor_meta       same facts as val
#   eager_input_vals  FakeTensors of the inputs, known from the input nodes' val
#   original_aten     the OpOverload before decomposition: equal to target in make_fx graphs
#   nn_module_stack, source_fn_stack, fwd_nn_module_stack, fwd_source_fn_stack: module objects
#   from_node, torch_fn, grapharg, example_value, unbacked_bindings: tracer internals
#   autograd_backward folded into phase
_DROPPED_META = frozenset({
    "tensor_meta", "eager_input_vals", "original_aten", "nn_module_stack", "source_fn_stack",
    "fwd_nn_module_stack", "fwd_source_fn_stack", "from_node", "torch_fn", "grapharg",
    "example_value", "unbacked_bindings", "autograd_backward",
})
# The importer keeps header facts here so that export_graph(import_graph(doc)) == doc.
GM_META_KEY = "jointfx"


class ExportError(ValueError):
    """A graph that cannot be written, or a document that cannot be read, with the node named."""


# ----------------------------------------------------------------------------- header specs


@dataclass(frozen=True)
class ProcessGroupSpec:
    name: str  # the group_name string collectives carry
    ranks: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.ranks)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ranks": list(self.ranks), "size": self.size}


@dataclass(frozen=True)
class InputSpec:
    kind: InputKind
    fqn: str | None = None

    def to_json(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": name}
        if self.fqn is not None:
            out["fqn"] = self.fqn
        return out


@dataclass(frozen=True)
class OutputSpec:
    kind: OutputKind
    fqn: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.fqn is not None:
            out["fqn"] = self.fqn
        return out


# ----------------------------------------------------------------------------- targets


def target_name(node: fx.Node) -> str:
    """FX target -> the format's target string ("aten.mm.default", "operator.getitem")."""
    target = node.target
    if node.op in ("placeholder", "get_attr", "output"):
        return str(target)
    if isinstance(target, torch._ops.OpOverload):
        return str(target)  # "ns.op.overload"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.replace("::", ".")  # "ns.op"
    module = getattr(target, "__module__", None) or ""
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(target))
    # operator.getitem reports module "_operator"; the format spells it "operator".
    if module == "_operator":
        module = "operator"
    return f"{module}.{qualname}" if module else qualname


def resolve_target(name: str, node_name: str = "?") -> Any:
    """The format's target string -> the callable FX stores (inverse of target_name)."""
    import builtins

    head, _, rest = name.partition(".")
    try:
        if head in ("operator", "builtins"):
            return getattr(operator if head == "operator" else builtins, rest)
        if head == "higher_order":
            return getattr(torch.ops.higher_order, rest)
        parts = name.split(".")
        if len(parts) in (2, 3):  # "ns.op" (an overload packet) or "ns.op.overload"
            found: Any = torch.ops
            for part in parts:
                found = getattr(found, part)
            return found
    except (AttributeError, RuntimeError) as e:
        raise ExportError(f"node {node_name}: unknown target {name!r}: {e}") from e
    raise ExportError(f"node {node_name}: cannot resolve target {name!r}")


# ----------------------------------------------------------------------------- args


@dataclass(frozen=True)
class Opaque:
    """An argument the format cannot express, carried through as its repr (never interpreted)."""

    type: str
    repr: str


def _float_json(x: float) -> Any:
    if math.isnan(x):
        return {"float": "nan"}
    if math.isinf(x):
        return {"float": "inf" if x > 0 else "-inf"}
    return x


def _concrete_int(x: Any) -> int | None:
    """A SymInt/SymBool with a known value made concrete (fake tracing has none). Never int() on
    a symbol: that would guard, i.e. specialize the caller's dynamic-shape graph."""
    if isinstance(x, (torch.SymInt, torch.SymBool)):
        node = x.node
        value = node.maybe_as_bool() if isinstance(x, torch.SymBool) else node.maybe_as_int()
        return None if value is None else int(value)
    try:
        return int(x)
    except Exception:  # noqa: BLE001 - unbacked symbols raise various errors
        return None


_IMMUTABLE_LIST = type(fx.immutable_collections.immutable_list())


def _dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


_DTYPE_NAMES = {v: k for k, v in vars(torch).items()
                if isinstance(v, torch.dtype) and str(v) == f"torch.{k}"}


def _device_name(device: torch.device) -> str:
    # str(torch.device) formats anew on each call; "cpu", "meta" and "cuda:0" cover most graphs.
    return _DEVICE_NAMES.get(device) or str(device)


_DEVICE_NAMES = {torch.device(d): d for d in ("cpu", "meta", "cuda", "cuda:0")}


def arg_to_json(value: Any, node_name: str) -> Any:
    """One FX argument -> JSON (docs/graph-format.md "Arguments")."""
    # Exact-type checks first: nearly every argument of a traced graph is one of these, and one
    # `type(x) is` test costs a fraction of the isinstance chain below (the exporter's per-node
    # cost is what an in-process pipeline pays on every call).
    kind = type(value)
    if kind is fx.Node:
        return {"node": value.name}
    if kind is int or kind is str or kind is bool or value is None:
        return value
    if kind is list or kind is _IMMUTABLE_LIST:
        return [arg_to_json(v, node_name) for v in value]
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, fx.Node):
        return {"node": value.name}
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float_json(float(value))
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value)}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value)}
    if isinstance(value, (torch.SymInt, torch.SymBool)):
        concrete = _concrete_int(value)
        if concrete is not None:
            return bool(concrete) if isinstance(value, torch.SymBool) else concrete
    if isinstance(value, torch.SymFloat):
        try:
            return _float_json(float(value))
        except Exception:  # noqa: BLE001
            pass
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"tuple": [arg_to_json(v, node_name) for v in value]}
    if isinstance(value, list):  # includes FX's immutable_list
        return [arg_to_json(v, node_name) for v in value]
    if isinstance(value, Opaque):
        return {"opaque": {"repr": value.repr, "type": value.type}}
    return {"opaque": {"repr": repr(value), "type": type(value).__name__}}


def _parse_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ExportError(f"unknown dtype {name!r}")
    return dtype


def _parse_layout(name: str) -> torch.layout:
    layout = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(layout, torch.layout):
        raise ExportError(f"unknown layout {name!r}")
    return layout


def _parse_memory_format(name: str) -> torch.memory_format:
    fmt = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(fmt, torch.memory_format):
        raise ExportError(f"unknown memory format {name!r}")
    return fmt


_FLOAT_WORDS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def arg_from_json(value: Any, env: Mapping[str, fx.Node], node_name: str) -> Any:
    """JSON -> FX argument (inverse of arg_to_json)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [arg_from_json(v, env, node_name) for v in value]
    if not isinstance(value, dict) or len(value) != 1:
        raise ExportError(f"node {node_name}: bad argument {value!r}")
    (key, inner), = value.items()
    if key == "node":
        if inner not in env:
            raise ExportError(f"node {node_name}: argument names unknown or later node {inner!r}")
        return env[inner]
    if key == "tuple":
        return tuple(arg_from_json(v, env, node_name) for v in inner)
    if key == "float":
        if inner not in _FLOAT_WORDS:
            raise ExportError(f"node {node_name}: bad float {inner!r}")
        return _FLOAT_WORDS[inner]
    if key == "dtype":
        return _parse_dtype(inner)
    if key == "device":
        return torch.device(inner)
    if key == "layout":
        return _parse_layout(inner)
    if key == "memory_format":
        return _parse_memory_format(inner)
    if key == "opaque":
        return Opaque(type=inner["type"], repr=inner["repr"])
    raise ExportError(f"node {node_name}: unknown argument kind {key!r}")


# ----------------------------------------------------------------------------- value meta


def val_to_json(val: Any) -> tuple[bool, Any]:
    """meta["val"] -> (representable, JSON value meta)."""
    if isinstance(val, torch.Tensor):
        if not val._has_symbolic_sizes_strides:
            # Every size and stride is a plain int: no per-element check needed.
            return True, {
                "device": _device_name(val.device),
                "dtype": _dtype_name(val.dtype),
                "shape": list(val.shape),
                "stride": list(val.stride()),
            }
        shape = [_concrete_int(s) for s in val.shape]
        stride = [_concrete_int(s) for s in val.stride()]
        if any(s is None for s in shape + stride):
            return False, None  # symbolic sizes have no value in the format
        return True, {
            "device": str(val.device),
            "dtype": str(val.dtype).removeprefix("torch."),
            "shape": shape,
            "stride": stride,
        }
    if val is None or isinstance(val, bool):
        return True, val
    if isinstance(val, (int, torch.SymInt, torch.SymBool)):
        concrete = _concrete_int(val)
        if concrete is None:
            return False, None
        return True, bool(concrete) if isinstance(val, torch.SymBool) else concrete
    if isinstance(val, (float, torch.SymFloat)):
        try:
            return True, _float_json(float(val))
        except Exception:  # noqa: BLE001 - an unbacked SymFloat has no value
            return False, None
    if isinstance(val, (list, tuple)):
        items = [val_to_json(v) for v in val]
        if all(ok for ok, _ in items):
            return True, [v for _, v in items]
    return False, None


class _ValFactory:
    """Recreates meta["val"] as FakeTensors of one FakeTensorMode per imported graph."""

    def __init__(self) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.mode = FakeTensorMode(allow_non_fake_inputs=True)

    def make(self, meta: Any) -> Any:
        if isinstance(meta, list):
            return tuple(self.make(m) for m in meta)
        if isinstance(meta, dict) and set(meta) == {"float"}:
            return _FLOAT_WORDS[meta["float"]]
        if isinstance(meta, dict):
            return fake_tensor(self.mode, meta["shape"], meta["stride"],
                               _parse_dtype(meta["dtype"]), torch.device(meta["device"]))
        return meta


def fake_tensor(mode: Any, shape: Sequence[int], stride: Sequence[int], dtype: torch.dtype,
                device: torch.device) -> Any:
    """A FakeTensor of `mode` with this shape, stride, dtype and device.

    The fast path wraps a meta tensor the way FakeTensorMode wraps the outputs of its own meta
    kernels (FakeTensorConverter.from_meta_and_device): about 30 us a tensor against 140 us for
    torch.empty_strided dispatched through the mode, which was most of the time an in-process
    pipeline spent creating values for new nodes. It needs no dispatch mode active (the meta
    tensor must be a plain one), else the mode's own path is taken."""
    converter = getattr(mode, "fake_tensor_converter", None)
    if converter is not None and torch._C._len_torch_dispatch_stack() == 0:
        plain = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        return converter.from_meta_and_device(mode, plain, device)
    with mode:
        return torch.empty_strided(shape, stride, dtype=dtype, device=device)


# ----------------------------------------------------------------------------- node meta


def _is_json_value(value: Any) -> bool:
    """Plain JSON data only (finite floats, string keys): what other meta may carry."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str or not _is_json_value(v):
                return False
        return True
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False


def _enum_int(value: Any) -> int | None:
    if isinstance(value, enum.Enum):
        value = value.value
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _node_meta(node: fx.Node, phase: str | None, include_stack_trace: bool) -> dict[str, Any]:
    # One walk over the node's meta, each key handled by name (_TYPED_META), dropped
    # (_DROPPED_META) or kept when it is plain JSON.
    out: dict[str, Any] = {}
    for key, value in node.meta.items():
        if key in _DROPPED_META or key == "phase" or not isinstance(key, str):
            continue  # (a key that is not a string has no JSON object form)
        if key == "val":
            ok, val = val_to_json(value)
            if ok:
                out["val"] = val
        elif key == "recompute":
            recompute = _enum_int(value)
            if recompute is not None:
                out["recompute"] = recompute
        elif key == "ac_graph_id" or key == "seq_nr":
            if isinstance(value, int) and not isinstance(value, bool):
                out[key] = value
        elif key == "stack_trace":
            if include_stack_trace and isinstance(value, str):
                out["stack_trace"] = value
        elif key == "custom":
            if isinstance(value, dict) and value and _is_json_value(value):
                out["custom"] = value
        elif _is_json_value(value):
            out[key] = value
    if phase is not None:
        out["phase"] = phase
    return out


# ----------------------------------------------------------------------------- phases


def _phases(graph: fx.Graph, outputs: Sequence[OutputSpec],
            param_names: set[str]) -> dict[fx.Node, str]:
    """phase of every call_function/get_attr node (docs/pytorch-bridge.md "Phase rules").

    1. meta["phase"] wins (graphs that came from import_graph);
    2. backward: meta["autograd_backward"]; if no node in the graph has that key, every node
       after the loss output in program order (autograd runs only after the loss exists);
    3. loss: non-backward nodes with custom.module_fqn == "loss" (or starting "loss."); if there
       are none: find the nodes that feed the loss output and come after the last node that
       reads a parameter-derived value (the FSDP unshard chain); loss is every non-backward node
       from the first of them to the loss output in program order, and every non-backward
       node after the loss output that reads only loss nodes (a loss op's side result);
    4. forward: the rest.
    """
    nodes = [n for n in graph.nodes if n.op in ("call_function", "get_attr")]
    explicit = {n: n.meta["phase"] for n in nodes if n.meta.get("phase") in PHASES}
    if len(explicit) == len(nodes):
        return explicit
    loss_node = _loss_output(graph, outputs)
    backward = _backward_nodes(graph, nodes, loss_node)
    loss = _loss_nodes(graph, nodes, backward, loss_node, param_names)
    phases = {}
    for n in nodes:
        if n in explicit:
            phases[n] = explicit[n]
        elif n in backward:
            phases[n] = "backward"
        elif n in loss:
            phases[n] = "loss"
        else:
            phases[n] = "forward"
    return phases


def _loss_output(graph: fx.Graph, outputs: Sequence[OutputSpec]) -> fx.Node | None:
    out_node = graph.output_node()
    values = out_node.args[0] if out_node.args else []
    if not isinstance(values, (list, tuple)):
        values = [values]
    for spec, value in zip(outputs, values):
        if spec.kind == "loss" and isinstance(value, fx.Node):
            return value
    return None


def _backward_nodes(graph: fx.Graph, nodes: list[fx.Node], loss: fx.Node | None) -> set[fx.Node]:
    if any("autograd_backward" in n.meta for n in graph.nodes):
        return {n for n in nodes if n.meta.get("autograd_backward")}
    if loss is None:
        return set()
    after = False
    result = set()
    for n in graph.nodes:
        if after and n in nodes:
            result.add(n)
        after = after or n is loss
    return result


def _param_value_nodes(graph: fx.Graph, param_names: set[str]) -> set[fx.Node]:
    """Nodes whose value derives from exactly one parameter and nothing else (FSDP chains)."""
    only_param: dict[fx.Node, str | None] = {}
    result = set()
    for n in graph.nodes:
        if n.op == "placeholder":
            only_param[n] = n.name if n.name in param_names else None
            continue
        sources = {only_param.get(i) for i in n.all_input_nodes}
        src = sources.pop() if len(sources) == 1 else None
        only_param[n] = src if n.all_input_nodes else None
        if src is not None and n.all_input_nodes:
            result.add(n)
    return result


def _loss_nodes(graph: fx.Graph, nodes: list[fx.Node], backward: set[fx.Node],
                loss: fx.Node | None, param_names: set[str]) -> set[fx.Node]:
    annotated = {n for n in nodes if n not in backward and _is_loss_fqn(n)}
    if annotated or loss is None:
        return annotated
    param_values = _param_value_nodes(graph, param_names)
    order = {n: i for i, n in enumerate(graph.nodes)}
    last_param_use = max((order[u] for v in param_values for u in v.users
                          if u not in param_values and u not in backward), default=-1)
    # Ancestors of the loss output, walking back until the last parameter use...
    feeding: set[fx.Node] = set()
    stack = [loss]
    while stack:
        n = stack.pop()
        if n in feeding or n.op != "call_function" or n in backward or order[n] <= last_param_use:
            continue
        feeding.add(n)
        stack.extend(n.all_input_nodes)
    if not feeding:
        return set()
    # ...then the whole program-order range from the first of them to the loss, so that side
    # values computed in between (saved activations, aliases) are loss too and phases stay
    # monotone: forward, then loss, then backward.
    start, end = min(order[n] for n in feeding), order[loss]
    result = {n for n in nodes if start <= order[n] <= end and n not in backward}
    # A side result of a loss op that the graph takes after the loss output (the total weight
    # of a model's own nll_loss_forward, read by its backward) is loss too, not forward.
    for n in nodes:
        if (order[n] > end and n not in backward and n.all_input_nodes
                and all(i in result for i in n.all_input_nodes)):
            result.add(n)
    return result


def _is_loss_fqn(node: fx.Node) -> bool:
    custom = node.meta.get("custom")
    fqn = custom.get("module_fqn") if isinstance(custom, dict) else None
    return isinstance(fqn, str) and (fqn == "loss" or fqn.startswith("loss."))


# ----------------------------------------------------------------------------- export


def _as_spec(cls: type, value: Any) -> Any:
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        fields = {k: v for k, v in value.items() if k in ("kind", "fqn", "name", "ranks")}
        if cls is ProcessGroupSpec:
            return ProcessGroupSpec(name=str(fields["name"]), ranks=tuple(fields["ranks"]))
        fields.pop("name", None)
        return cls(**fields)
    raise TypeError(f"expected {cls.__name__} or a mapping, got {value!r}")


def export_graph(
    gm: fx.GraphModule,
    *,
    process_groups: Iterable[ProcessGroupSpec | Mapping[str, Any]] | None = None,
    inputs: Sequence[InputSpec | Mapping[str, Any]] | None = None,
    outputs: Sequence[OutputSpec | Mapping[str, Any]] | None = None,
    graph_meta: Mapping[str, Any] | None = None,
    include_stack_trace: bool = False,
    include_constants: bool = True,
) -> dict[str, Any]:
    """A GraphModule -> the JSON v1 document (a dict; dumps_graph writes it).

    inputs: one spec per placeholder in order, or one per *tensor* placeholder (the non-tensor
    ones, e.g. DTensor's DeviceMesh placeholders, are then filled in as "mesh" / "opaque"); by
    default tensors are user_input. outputs: likewise per output element (default "other").
    Header arguments left out fall back to what import_graph or run_pipeline stored on the
    module, so export(import(doc)) == doc; process groups left out are read from the graph's
    collectives when torch.distributed knows them. What cannot be inferred is reported with a
    warning. get_attr tensors go into the header's "constants" (include_constants).
    """
    return _export_document(gm, process_groups=process_groups, inputs=inputs, outputs=outputs,
                            graph_meta=graph_meta, include_stack_trace=include_stack_trace,
                            include_constants=include_constants, stacklevel=3)


def _export_document(gm: fx.GraphModule, *, include_stack_trace: bool = False,
                     **head_kwargs: Any) -> dict[str, Any]:
    """export_graph's document; `head_kwargs` go to _export_head (run_pipeline passes
    warn_no_specs=False: its report says the same as a finding)."""
    head, phases = _export_head(gm, **head_kwargs)
    targets: dict[Any, str] = {}
    head["nodes"] = [_node_to_json(n, phases.get(n), include_stack_trace, targets)
                     for n in gm.graph.nodes]
    return head


@dataclass
class ExportedText:
    """export_graph's document for the extension (export_text, export_native), with what the
    in-place application needs to know about the graph as it was exported: as JSON text, or as
    the extension's graph built from the FX nodes (`graph`, text None)."""

    text: bytes | str | None
    header: dict[str, Any]  # the document without "nodes"
    phases: Mapping[fx.Node, str]
    include_stack_trace: bool

    graph: Any = None  # jointfx._C.FxGraph, from export_native

    def node_meta(self, node: fx.Node) -> dict[str, Any]:
        """The exported meta of `node` (call before changing its meta)."""
        return _node_meta(node, self.phases.get(node), self.include_stack_trace)

    @property
    def document(self) -> Any:
        """What jointfx._C.EditScript reads: the graph, else the text."""
        return self.graph if self.graph is not None else self.text


def export_native(gm: fx.GraphModule, *, extension: Any, include_stack_trace: bool = False,
                  stacklevel: int = 2, **header: Any) -> ExportedText:
    """export_text's document as the extension's own graph: extension.graph_from_fx builds it
    from the fx.Node objects, with no JSON text for the nodes in between (the graph the C++
    reader makes of export_text's text; tests/python/test_fx_export.py compares the two). Where
    the reader would reject the document, the text is exported instead, so that reading it
    reports the problem where it is."""
    head, compute_phases = _export_head(gm, stacklevel=stacklevel, lazy_phases=True, **header)
    nodes = list(gm.graph.nodes)
    head_text = _json_bytes({**head, "nodes": []})
    phases: Mapping[fx.Node, str] = _MetaPhases(gm.graph)
    hooks = _native_hooks()
    try:
        # Torch-function dispatch off for the build: each dtype/shape/stride read of a tensor
        # subclass (FakeTensor) otherwise first looks up its __torch_function__, a third of the
        # cost of those reads. Reading metadata calls no torch function.
        with torch._C.DisableTorchFunctionSubclass():
            # First with each node's own meta["phase"] (graphs from import_graph or an earlier
            # run have them all): rule 1 of _phases decides alone then.
            graph = extension.graph_from_fx(nodes, None, include_stack_trace, hooks, head_text)
            if graph is None:
                phases = compute_phases()
                graph = extension.graph_from_fx(nodes, [phases.get(n) for n in nodes],
                                                include_stack_trace, hooks, head_text)
    except Exception:  # noqa: BLE001 - reading the text says what is wrong, or succeeds
        if isinstance(phases, _MetaPhases):
            phases = compute_phases()
        return _exported_text(head, phases, nodes, extension, include_stack_trace)
    return ExportedText(None, head, phases, include_stack_trace, graph)


class _MetaPhases(Mapping):
    """_phases' result for a graph whose call_function and get_attr nodes all have their phase
    in meta["phase"], read from there on demand."""

    def __init__(self, graph: fx.Graph) -> None:
        self._graph = graph

    def __getitem__(self, node: fx.Node) -> str:
        if node.op in ("call_function", "get_attr") and node.graph is self._graph:
            return node.meta["phase"]
        raise KeyError(node)

    def __iter__(self) -> Iterator[fx.Node]:
        return (n for n in self._graph.nodes if n.op in ("call_function", "get_attr"))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def export_text(gm: fx.GraphModule, *, extension: Any = None, include_stack_trace: bool = False,
                stacklevel: int = 2, **header: Any) -> ExportedText:
    """export_graph(gm, **header) as JSON text (any key order, not the canonical dumps_graph
    form), for the C++ reader in this process.

    With the extension (jointfx._C), its export_nodes writes the nodes straight from the FX
    graph, the same JSON as _node_to_json; the header is written by orjson (or json). Any failure
    there falls back to export_graph, which gives the same document or the ExportError."""
    head, phases = _export_head(gm, stacklevel=stacklevel, **header)
    return _exported_text(head, phases, list(gm.graph.nodes), extension, include_stack_trace)


def _exported_text(head: dict[str, Any], phases: Mapping[fx.Node, str], nodes: list[fx.Node],
                   extension: Any, include_stack_trace: bool) -> ExportedText:
    if extension is not None:
        try:
            body = extension.export_nodes(nodes, [phases.get(n) for n in nodes],
                                          include_stack_trace, _native_hooks())
        except Exception:  # noqa: BLE001 - the Python exporter says what is wrong, or succeeds
            body = None
        if body is not None:
            head_text = _json_bytes(head)
            text = head_text[:-1] + (b',"nodes":' if head else b'"nodes":') + body + b"}"
            return ExportedText(text, head, phases, include_stack_trace)
    doc = dict(head)
    targets: dict[Any, str] = {}
    doc["nodes"] = [_node_to_json(n, phases.get(n), include_stack_trace, targets) for n in nodes]
    return ExportedText(_json_bytes(doc), head, phases, include_stack_trace)


def _native_hooks() -> dict[str, Any]:
    """What jointfx._C.export_nodes calls back into: the Python definitions of each mapping,
    for the values it does not write itself."""
    from torch._subclasses.fake_tensor import FakeTensor

    return {
        "node_type": fx.Node,
        "list_type": _IMMUTABLE_LIST,
        "tensor_type": torch.Tensor,
        "dropped": _DROPPED_META,
        "memo": {},
        "names": {},
        "memo_types": (torch.dtype, torch.device, torch.layout, torch.memory_format),
        "target_name": target_name,
        "arg_to_json": arg_to_json,
        "val_to_json": val_to_json,
        "enum_int": _enum_int,
        "node_to_json": _node_to_json,
        "dtype_name": _dtype_name,
        "fake_tensor_type": FakeTensor,
        "tensor_shim": _tensor_shim(),
    }


@functools.cache
def _tensor_shim() -> tuple[Any, ...] | None:
    """PyTorch's stable C ABI for tensor metadata (AOTInductor's shim in libtorch_cpu), for
    graph_from_fx: (list of tensors -> handles, the addresses of aoti_torch_get_dim, _get_sizes,
    _get_strides, _get_dtype and _delete_tensor_object, {dtype code: torch.dtype}). None where
    this torch lacks any of it: the build reads the attributes then."""
    try:
        alloc = torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        fns = [ctypes.cast(getattr(lib, "aoti_torch_" + name), ctypes.c_void_p).value
               for name in ("get_dim", "get_sizes", "get_strides", "get_dtype",
                            "delete_tensor_object")]
        codes: dict[int, torch.dtype] = {}
        for dtype in {v for v in vars(torch).values() if isinstance(v, torch.dtype)}:
            code_of = getattr(lib, "aoti_torch_dtype_" + str(dtype).removeprefix("torch."), None)
            if code_of is not None:
                code_of.restype = ctypes.c_int32
                codes[int(code_of())] = dtype
    except (AttributeError, OSError):
        return None
    return (alloc, *fns, codes)


def _json_bytes(value: Any) -> bytes:
    """JSON text for the C++ reader: orjson where installed (about 7x the json module's speed on
    a 10K-node document), else the json module. The exporter never puts a non-finite float into
    a document (they are {"float": ...}), so orjson's NaN-as-null cannot arise; what orjson
    refuses (an int beyond 64 bits) goes through the json module."""
    try:
        import orjson
    except ImportError:
        orjson = None
    if orjson is not None:
        try:
            return orjson.dumps(value)
        except TypeError:  # orjson.JSONEncodeError
            pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def _export_head(
    gm: fx.GraphModule,
    *,
    process_groups: Iterable[ProcessGroupSpec | Mapping[str, Any]] | None = None,
    inputs: Sequence[InputSpec | Mapping[str, Any]] | None = None,
    outputs: Sequence[OutputSpec | Mapping[str, Any]] | None = None,
    graph_meta: Mapping[str, Any] | None = None,
    include_constants: bool = True,
    stacklevel: int = 1,
    lazy_phases: bool = False,
    warn_no_specs: bool = True,
) -> tuple[dict[str, Any], Any]:
    """export_graph's document without "nodes", and every node's phase (a dict); with
    `lazy_phases`, a function that computes that dict instead. A warning names the code
    `stacklevel` frames above this function's caller; `warn_no_specs=False` leaves out the one
    about a graph with collectives and no input specs."""
    stored = gm.meta.get(GM_META_KEY, {}) if hasattr(gm, "meta") else {}
    placeholders = gm.graph.find_nodes(op="placeholder")  # FX keeps them indexed, in order
    if process_groups is None and "process_groups" not in stored:
        process_groups = infer_process_groups(gm)
    pgs = [_as_spec(ProcessGroupSpec, p) for p in
           (process_groups if process_groups is not None else stored.get("process_groups", []))]
    given_in = inputs if inputs is not None else stored.get("inputs", [])
    if not given_in and placeholders and warn_no_specs:
        _warn_no_specs(gm, len(placeholders), stacklevel + 1)
    in_specs = _fill_specs([_as_spec(InputSpec, s) for s in given_in],
                           [_value_kind(n.meta.get("val", _ABSENT)) for n in placeholders],
                           InputSpec("user_input"), InputSpec, "input", "placeholders")
    out_values = _output_values(gm.graph)
    given_out = outputs if outputs is not None else stored.get("outputs", [])
    out_specs = _fill_specs([_as_spec(OutputSpec, s) for s in given_out],
                            [_value_kind(v.meta.get("val", _ABSENT) if isinstance(v, fx.Node)
                                         else v) for v in out_values],
                            OutputSpec("other"), OutputSpec, "output", "outputs")
    meta = dict(graph_meta if graph_meta is not None else stored.get("meta", {}))
    if not _is_json_value(meta):
        raise ExportError("graph_meta must be plain JSON data")
    if "mesh" not in meta and (mesh := _mesh_meta(placeholders)) is not None:
        meta["mesh"] = mesh

    buffer_fqns = {s.fqn for s in in_specs if s.kind == "buffer"}
    for i, spec in enumerate(out_specs):
        if spec.kind == "buffer_mutation" and spec.fqn not in buffer_fqns:
            raise ExportError(f"output {i} (buffer_mutation) names {spec.fqn!r}, which is no "
                              "buffer input")
    param_names = {n.name for n, s in zip(placeholders, in_specs) if s.kind == "parameter"}

    def phases() -> dict[fx.Node, str]:
        return _phases(gm.graph, out_specs, param_names)

    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "process_groups": [p.to_json() for p in pgs],
        "inputs": [s.to_json(n.name) for n, s in zip(placeholders, in_specs)],
        "outputs": [s.to_json() for s in out_specs],
        "meta": meta,
    }
    meta.pop(SUBGRAPHS_KEY, None)  # the module's own subgraphs replace any stored ones
    if include_constants:
        _put_attr_values(gm, doc, meta, stacklevel + 1)
    return doc, (phases if lazy_phases else phases())


_ABSENT = object()


def _mesh_meta(placeholders: Sequence[fx.Node]) -> dict[str, Any] | None:
    """Graph meta "mesh" ({"dim_names", "shape"}) from the DeviceMesh placeholders of a DTensor
    graph (torchtitan's tracer flattens each DTensor into its local tensor and its mesh): the
    one root mesh they share, when its ranks are 0..N-1 in row-major order. `jointfx exec`
    needs it to give each rank its own copy of a group that spans part of the world (HSDP's
    shard and replicate groups are named as rank 0 sees them). None when there is no such mesh."""
    roots: list[Any] = []
    for node in placeholders:
        value = node.meta.get("val")
        if type(value).__name__ != "DeviceMesh":
            continue
        root = value._get_root_mesh() if hasattr(value, "_get_root_mesh") else value
        if all(r is not root for r in roots):
            roots.append(root)
    if len(roots) != 1:
        return None
    mesh = roots[0]
    ranks = mesh.mesh.flatten().tolist()
    if ranks != list(range(len(ranks))):
        return None
    out: dict[str, Any] = {"shape": [int(s) for s in mesh.shape]}
    if mesh.mesh_dim_names:
        out["dim_names"] = list(mesh.mesh_dim_names)
    return out


def _warn_no_specs(gm: fx.GraphModule, count: int, stacklevel: int) -> None:
    import warnings

    has_collectives = any(n.op == "call_function" and target_name(n).startswith("_c10d_functional.")
                          for n in gm.graph.nodes)
    if has_collectives:
        warnings.warn(
            f"export_graph: no input specs given for a graph with collectives: its {count} "
            "placeholders are exported as user inputs (non-tensor ones as mesh/opaque), so no "
            "parameter is known and FSDP passes will find no chain; pass inputs=[InputSpec(...)] "
            "or use jointfx.specs_from_traced()", stacklevel=stacklevel + 1)


def specs_from_traced(traced: Any, module: torch.nn.Module | None = None) -> dict[str, Any]:
    """Header specs for a traced graph, so that `export_graph(traced.gm, **specs)` or
    `run_pipeline(traced.gm, p, **specs)` needs nothing by hand.

    `traced` is what `jointfx.trace` returns (a TracedGraph: its own specs, returned as
    {"inputs", "outputs", "process_groups", "graph_meta"}; `module` is not needed, and the same
    header is already in `traced.gm.meta["jointfx"]`), or what torchtitan's graph_trainer tracer
    produced (`minimal_fx_tracer(step)(*args)`: a TracedResult with gm, state_fqns and the
    subclass layouts), read as follows.

    Flat inputs are the module state (parameters, then buffers, by FQN) and then the user's
    arguments; each DTensor flattens to its local tensor plus a DeviceMesh placeholder. Outputs
    are GraphTrainer's `[loss, *grads]`, each gradient a local tensor plus its mesh. Without
    `module`, the first len(outputs) - 1 state entries are the parameters (every parameter gets
    a gradient) and the rest buffers. Returns {"inputs", "outputs", "process_groups"}.
    """
    if not hasattr(traced, "state_fqns"):
        if all(hasattr(traced, a) for a in ("gm", "inputs", "outputs", "process_groups",
                                            "graph_meta")):  # jointfx.trace's TracedGraph
            return {"inputs": list(traced.inputs), "outputs": list(traced.outputs),
                    "process_groups": list(traced.process_groups),
                    "graph_meta": dict(traced.graph_meta)}
        raise TypeError(f"specs_from_traced takes what jointfx.trace or torchtitan's "
                        f"minimal_fx_tracer returns, not a {type(traced).__name__}")
    gm = traced.gm
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    state = list(traced.state_fqns)
    n_outputs = int(traced.num_flat_outputs)
    if module is not None:
        params = {name for name, p in module.named_parameters(remove_duplicate=False)}
        grad_fqns = [name for name, p in module.named_parameters(remove_duplicate=False)
                     if p.requires_grad]
    else:
        params = set(state[:max(n_outputs - 1, 0)])
        grad_fqns = state[:max(n_outputs - 1, 0)]

    def pieces(layouts: Mapping[int, Any], i: int) -> int:
        layout = layouts.get(i)
        return int(layout.num_tensors) if layout is not None else 1

    inputs: list[InputSpec] = []
    k = 0
    for i in range(int(traced.num_flat_inputs)):
        first = True
        for _ in range(pieces(traced.input_subclass_layouts, i)):
            if k >= len(placeholders):
                raise ExportError(f"the tracer's layouts describe more than the graph's "
                                  f"{len(placeholders)} placeholders")
            kind = _value_kind(placeholders[k].meta.get("val", _ABSENT))
            if kind != "tensor":
                inputs.append(InputSpec(kind))  # type: ignore[arg-type]
            elif first and i < len(state):
                fqn = state[i]
                inputs.append(InputSpec("parameter" if fqn in params else "buffer", fqn))
                first = False
            else:
                inputs.append(InputSpec("user_input"))
                first = False
            k += 1
    if k != len(placeholders):
        raise ExportError(f"the tracer's layouts describe {k} placeholders, the graph has "
                          f"{len(placeholders)}")
    values = _output_values(gm.graph)
    outputs: list[OutputSpec] = []
    k = 0
    for i in range(n_outputs):
        first = True
        for _ in range(pieces(traced.output_subclass_layouts, i)):
            if k >= len(values):
                raise ExportError("the tracer's output layouts describe more than the graph's "
                                  f"{len(values)} outputs")
            v = values[k]
            kind = _value_kind(v.meta.get("val", _ABSENT) if isinstance(v, fx.Node) else v)
            if kind != "tensor":
                outputs.append(OutputSpec(kind))  # type: ignore[arg-type]
            elif first and i == 0:
                outputs.append(OutputSpec("loss"))
            elif first and 1 <= i <= len(grad_fqns):
                outputs.append(OutputSpec("gradient", grad_fqns[i - 1]))
            else:
                outputs.append(OutputSpec("other"))
            first = False if kind == "tensor" else first
            k += 1
    if k != len(values):
        raise ExportError(f"the tracer's output layouts describe {k} outputs, the graph has "
                          f"{len(values)}")
    return {"inputs": inputs, "outputs": outputs, "process_groups": infer_process_groups(gm)}


def _value_kind(val: Any) -> str:
    """"tensor", "mesh" (a DeviceMesh) or "opaque" (anything else) for a placeholder's or an
    output's value; "tensor" also when the value is unknown (no meta["val"])."""
    if val is _ABSENT or isinstance(val, torch.Tensor):
        return "tensor"
    if isinstance(val, fx.Node):
        return "tensor"
    if type(val).__name__ == "DeviceMesh":
        return "mesh"
    return "opaque"


def _fill_specs(given: list[Any], kinds: list[str], default: Any, cls: type, what: str,
                plural: str) -> list[Any]:
    """One spec per value: the given list if it has one per value; one per tensor value (the
    non-tensor values get their own kind); or, when none are given, the default for tensors."""
    nonspec = {"mesh": cls("mesh"), "opaque": cls("opaque")}
    tensors = [k == "tensor" for k in kinds]
    if len(given) == len(kinds) and given:
        return given
    if not given:
        return [default if t else nonspec[k] for t, k in zip(tensors, kinds)]
    if len(given) == sum(tensors):
        it = iter(given)
        return [next(it) if t else nonspec[k] for t, k in zip(tensors, kinds)]
    raise ExportError(f"{len(given)} {what} specs for {len(kinds)} {plural} "
                      f"({sum(tensors)} of them tensors): give one spec per {what} or one per "
                      f"tensor {what}")


def _constants(gm: fx.GraphModule) -> list[dict[str, Any]]:
    """The header's constants: every get_attr target whose value is a real tensor."""
    from torch._subclasses.fake_tensor import FakeTensor

    out = []
    seen = set()
    for node in gm.graph.find_nodes(op="get_attr"):
        target = str(node.target)
        if target in seen:
            continue
        seen.add(target)
        try:
            value = _get_attr(gm, target)
        except AttributeError:
            continue
        if not isinstance(value, torch.Tensor) or isinstance(value, FakeTensor) or value.is_meta:
            continue
        t = value.detach().to("cpu").contiguous()
        data = ctypes.string_at(t.data_ptr(), t.nbytes) if t.numel() else b""
        out.append({"data": data.hex(), "device": str(value.device),
                    "dtype": str(t.dtype).removeprefix("torch."), "name": target,
                    "shape": [int(s) for s in t.shape]})
    out.sort(key=lambda c: c["name"])
    return out


# Graph meta key holding the bodies of higher-order ops' subgraphs (docs/graph-format.md).
SUBGRAPHS_KEY = "subgraphs"


def _subgraphs(gm: fx.GraphModule, stacklevel: int) -> dict[str, Any]:
    """The bodies of the get_attr targets that are GraphModules (the subgraphs of higher-order
    ops: torch.cond's branches, forward and backward), by target, each a document of its own:
    {"nodes", "returns"} ("tuple", "list" or "value": what its output node returns), and its own
    "constants" and "subgraphs" where it has them. The C++ library carries them in the graph
    meta untouched; import_graph rebuilds them. A get_attr whose value is neither a tensor nor a
    GraphModule cannot be written: a warning names it, rather than letting the value go."""
    import warnings

    out: dict[str, Any] = {}
    lost: list[str] = []
    for node in gm.graph.find_nodes(op="get_attr"):
        target = str(node.target)
        if target in out or target in lost:
            continue
        try:
            value: Any = _get_attr(gm, target)
        except AttributeError:
            continue  # import_graph stands in zeros of the recorded shape, as it always did
        if isinstance(value, fx.GraphModule):
            out[target] = _subgraph_doc(value, stacklevel + 1)
        elif not isinstance(value, torch.Tensor):
            lost.append(f"{target!r} ({type(value).__name__})")
    if lost:
        warnings.warn(f"export_graph: get_attr {', '.join(lost)} is neither a tensor nor a "
                      "GraphModule: the document cannot carry its value", stacklevel=stacklevel + 1)
    return dict(sorted(out.items()))


def _subgraph_doc(sub: fx.GraphModule, stacklevel: int) -> dict[str, Any]:
    targets: dict[Any, str] = {}
    doc: dict[str, Any] = {"nodes": [_node_to_json(n, None, False, targets)
                                     for n in sub.graph.nodes]}
    # The output node's one argument is a list in the format; a higher-order op may want its
    # subgraph to return a tuple (cond's branches) or a single tensor.
    result = sub.graph.output_node().args[0]
    doc["returns"] = ("tuple" if isinstance(result, tuple) else
                      "list" if isinstance(result, list) else "value")
    _put_attr_values(sub, doc, doc, stacklevel + 1)
    return doc


def _put_attr_values(gm: fx.GraphModule, doc: dict[str, Any], subgraphs_into: dict[str, Any],
                     stacklevel: int) -> None:
    """The values of `gm`'s get_attr nodes, where it has any: its tensor constants as
    doc["constants"], its subgraphs as subgraphs_into["subgraphs"] (the graph meta of a graph,
    the document itself of a subgraph)."""
    if constants := _constants(gm):
        doc["constants"] = constants
    if subgraphs := _subgraphs(gm, stacklevel + 1):
        subgraphs_into[SUBGRAPHS_KEY] = subgraphs


def _get_attr(mod: torch.nn.Module, target: str) -> Any:
    obj: Any = mod
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def infer_process_groups(gm: fx.GraphModule) -> list[ProcessGroupSpec]:
    """The groups the graph's collectives name, as torch.distributed knows them (ranks in the
    default group's numbering); groups it does not know are left out."""
    names: list[str] = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or not target_name(node).startswith("_c10d_functional."):
            continue
        for a in [*node.args, *node.kwargs.values()]:
            if isinstance(a, str) and a not in names and a not in ("sum", "avg", "max", "min",
                                                                  "product", "premul_sum"):
                names.append(a)
    if not names:
        return []
    try:
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _resolve_process_group
    except ImportError:
        return []
    if not dist.is_available() or not dist.is_initialized():
        return []
    out = []
    for name in names:
        try:
            ranks = dist.get_process_group_ranks(_resolve_process_group(name))
        except Exception:  # noqa: BLE001 - a name torch.distributed does not know
            continue
        out.append(ProcessGroupSpec(name, tuple(int(r) for r in ranks)))
    return out


def _output_values(graph: fx.Graph) -> list[Any]:
    out = graph.output_node()
    values = out.args[0] if out.args else []
    return list(values) if isinstance(values, (list, tuple)) else [values]


def _node_to_json(node: fx.Node, phase: str | None, include_stack_trace: bool,
                  targets: dict[Any, str] | None = None) -> dict[str, Any]:
    """One node -> JSON; `targets` memoizes target_name per call_function target (a graph has a
    few dozen distinct ones)."""
    if node.op == "call_function" and targets is not None:
        try:
            target = targets[node.target]
        except KeyError:
            target = targets[node.target] = target_name(node)
        except TypeError:  # an unhashable callable
            target = target_name(node)
    else:
        target = target_name(node)
    try:
        args = [arg_to_json(a, node.name) for a in node.args]
        if node.op == "output" and args and not isinstance(args[0], list):
            # FX allows a tuple or a single value; the format's output has one list argument.
            args = [args[0]["tuple"] if isinstance(args[0], dict) and "tuple" in args[0]
                    else [args[0]]]
        kwargs = {k: arg_to_json(v, node.name) for k, v in node.kwargs.items()}
    except Exception as e:  # keep the node name on any conversion failure
        raise ExportError(f"node {node.name}: {e}") from e
    return {
        "args": args,
        "kwargs": kwargs,
        "meta": _node_meta(node, phase, include_stack_trace),
        "name": node.name,
        "op": node.op,
        "target": target,
    }


# ----------------------------------------------------------------------------- buffer updates


# native_batch_norm writes running_mean / running_var (arguments 3 and 4) in training mode, but its
# schema does not annotate them (`Tensor? running_mean`); ir/mutation.cc lists the same facts.
_UNANNOTATED_WRITES = {torch.ops.aten.native_batch_norm.default: (3, 4)}


def written_arguments(node: fx.Node) -> list[Any]:
    """The arguments `node` writes in place: those its schema marks `Tensor(a!)`, plus
    native_batch_norm's running statistics in training mode."""
    if node.op != "call_function":
        return []
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    positions = [i for i, a in enumerate(schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write]
    if node.target in _UNANNOTATED_WRITES and (len(node.args) <= 5 or node.args[5] is not False):
        positions += _UNANNOTATED_WRITES[node.target]
    out = []
    for i in positions:
        name = schema.arguments[i].name
        out.append(node.args[i] if i < len(node.args) else node.kwargs.get(name))
    return out


def inplace_buffer_writes(gm: fx.GraphModule,
                          input_fqns: Sequence[str | None]) -> dict[str, list[str]]:
    """{node name: [buffer FQN, ...]} for every node that writes a buffer placeholder in place
    (through views). `input_fqns` gives the FQN of each placeholder that is a buffer, None for
    the rest: the in-place counterpart of torch.export's `buffers_to_mutate`."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    root: dict[fx.Node, str] = {p: f for p, f in zip(placeholders, input_fqns) if f}
    out: dict[str, list[str]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        written = [root[v] for v in written_arguments(node) if isinstance(v, fx.Node) and v in root]
        if written:
            out[node.name] = written
            continue
        schema = getattr(node.target, "_schema", None)
        # A view of a buffer aliases it: later writes through the view write the buffer.
        if (schema is not None and node.args and isinstance(node.args[0], fx.Node)
                and node.args[0] in root and any(r.alias_info is not None for r in schema.returns)):
            root[node] = root[node.args[0]]
    return out


def buffers_to_mutate(gm: fx.GraphModule) -> dict[str, list[str]]:
    """Which nodes update which buffers, from the header import_graph stored (or export_graph's
    specs): {output value name: [fqn]} for outputs of kind buffer_mutation (torch.export's
    `graph_signature.buffers_to_mutate`) and {node name: [fqn, ...]} for in-place writes."""
    stored = gm.meta.get(GM_META_KEY, {}) if hasattr(gm, "meta") else {}
    inputs = stored.get("inputs", [])
    fqn_of = {i.get("name"): i.get("fqn") for i in inputs if i.get("kind") == "buffer"}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = inplace_buffer_writes(gm, [fqn_of.get(p.name) for p in placeholders])
    values = _output_values(gm.graph)
    for spec, value in zip(stored.get("outputs", []), values):
        if spec.get("kind") == "buffer_mutation" and isinstance(value, fx.Node):
            out.setdefault(value.name, []).append(spec.get("fqn", ""))
    return out


# ----------------------------------------------------------------------------- import


def import_graph(doc: Mapping[str, Any]) -> fx.GraphModule:
    """The JSON v1 document -> a GraphModule with the same nodes, names, targets, args, kwargs
    and meta. meta["val"] becomes FakeTensors; phase is kept as meta["phase"] and backward also
    sets meta["autograd_backward"]; recompute becomes a CheckpointPolicy."""
    if doc.get("format") != FORMAT:
        raise ExportError(f"not a jointfx graph (format {doc.get('format')!r})")
    if doc.get("version") != VERSION:
        raise ExportError(f"unsupported version {doc.get('version')!r} (this reader: {VERSION})")
    meta = doc.get("meta", {})
    gm = _import_module(doc, meta.get(SUBGRAPHS_KEY, {}) if isinstance(meta, Mapping) else {},
                        _ValFactory(), "")
    gm.meta[GM_META_KEY] = {
        "process_groups": [dict(p) for p in doc.get("process_groups", [])],
        "inputs": [dict(i) for i in doc.get("inputs", [])],
        "outputs": [dict(o) for o in doc.get("outputs", [])],
        "meta": dict(doc.get("meta", {})),
    }
    return gm


def _import_module(doc: Mapping[str, Any], subgraphs: Mapping[str, Any], vals: _ValFactory,
                   where: str) -> fx.GraphModule:
    """A GraphModule of `doc`'s nodes, its get_attr values from `doc`'s constants, else from
    `subgraphs` (GraphModules, built the same way), else zeros of the recorded shape. `where` is
    the JSON pointer of `doc`, for errors."""
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    for index, nd in enumerate(doc["nodes"]):
        name = nd.get("name", f"#{index}")
        try:
            env[name] = _import_node(graph, nd, env, vals)
        except ExportError as e:
            if not where:
                raise
            raise ExportError(f"{where}: {e}") from e
        except Exception as e:
            raise ExportError(f"{where}/nodes/{index} (node {name}): {e}") from e
    root = torch.nn.Module()
    constants = {c["name"]: c for c in doc.get("constants", [])}
    for node in graph.nodes:
        if node.op != "get_attr":
            continue
        target = str(node.target)
        if target in constants:
            _set_attr(root, target, _constant_tensor(constants[target]))
        elif target in subgraphs:
            sub = subgraphs[target]
            at = f"{where or '/meta'}/{SUBGRAPHS_KEY}/{target}"
            _set_module(root, target, _import_module(sub, sub.get(SUBGRAPHS_KEY, {}), vals, at))
        else:
            # No value in the document: stand in zeros of the recorded shape.
            _set_attr_placeholder(root, target, node.meta.get("val"))
    returns = doc.get("returns", "list")
    if returns != "list":
        out = graph.output_node()
        result = out.args[0]
        out.args = (tuple(result) if returns == "tuple" else result[0],)
    return fx.GraphModule(root, graph)


def _has_empty_workspace(val: Any) -> bool:
    return isinstance(val, (tuple, list)) and any(
        isinstance(v, torch.Tensor) and v.numel() == 0 for v in val)


def grad_mode(gm: fx.GraphModule) -> Any:
    """The grad mode to call a joint graph in: torch.no_grad() (the graph is its own backward),
    unless a multi-output node's meta has an empty tensor. Meta kernels give an empty tensor for
    the scratch a real kernel keeps for its backward (aten.mkldnn_rnn_layer's workspace), and
    that kernel fills it only with grad mode on, as when the graph was traced; with it off the
    backward gets None and fails. Grad mode on records nothing while no input requires grad.
    `jointfx exec` makes the same choice node by node (runtime/executor.cc, emptyWorkspace)."""
    if any(_has_empty_workspace(n.meta.get("val")) for n in gm.graph.nodes):
        return torch.enable_grad()
    return torch.no_grad()


def _import_node(graph: fx.Graph, nd: Mapping[str, Any], env: Mapping[str, fx.Node],
                 vals: _ValFactory) -> fx.Node:
    name, op = nd["name"], nd["op"]
    if name in env:
        raise ExportError(f"node {name}: duplicate name")
    args = tuple(arg_from_json(a, env, name) for a in nd.get("args", []))
    kwargs = {k: arg_from_json(v, env, name) for k, v in nd.get("kwargs", {}).items()}
    if op == "call_function":
        target: Any = resolve_target(nd["target"], name)
    elif op in ("placeholder", "get_attr", "output"):
        target = nd["target"]
        if op == "output":
            args = (args[0],) if args else ([],)
    else:
        raise ExportError(f"node {name}: unsupported op {op!r}")
    node = graph.create_node(op, target, args, kwargs, name=name)
    if node.name != name:
        raise ExportError(f"node {name}: name is not a valid FX identifier (got {node.name})")
    node.meta = _import_meta(nd.get("meta", {}), vals)
    return node


@functools.cache
def _checkpoint_policies() -> dict[int, Any]:
    """CheckpointPolicy by value: the enum's own lookup costs a Python call per node."""
    from torch.utils.checkpoint import CheckpointPolicy

    return {p.value: p for p in CheckpointPolicy}


def _import_meta(meta: Mapping[str, Any], vals: _ValFactory) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if key == "val":
            out["val"] = vals.make(value)
        elif key == "phase":
            out["phase"] = value
            if value == "backward":
                out["autograd_backward"] = True
        elif key == "recompute":
            policy = _checkpoint_policies().get(value) if type(value) is int else None
            if policy is None:
                from torch.utils.checkpoint import CheckpointPolicy

                policy = CheckpointPolicy(value)  # its error for a value it does not have
            out["recompute"] = policy
        elif key == "custom":
            out["custom"] = dict(value)
        else:
            out[key] = value
    return out


def _constant_tensor(const: Mapping[str, Any]) -> torch.Tensor:
    dtype = _parse_dtype(const["dtype"])
    data = bytearray(bytes.fromhex(const["data"]))
    flat = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(const["shape"]).clone()


def _set_attr_placeholder(root: torch.nn.Module, target: str, val: Any) -> None:
    value = torch.zeros(val.shape, dtype=val.dtype) if isinstance(val, torch.Tensor) else None
    _set_attr(root, target, value)


def _owner(root: torch.nn.Module, target: str) -> tuple[torch.nn.Module, str]:
    owner = root
    *path, leaf = target.split(".")
    for part in path:
        if not hasattr(owner, part):
            owner.add_module(part, torch.nn.Module())
        owner = getattr(owner, part)
    return owner, leaf


def _set_attr(root: torch.nn.Module, target: str, value: Any) -> None:
    owner, leaf = _owner(root, target)
    owner.register_buffer(leaf, value)


def _set_module(root: torch.nn.Module, target: str, module: torch.nn.Module) -> None:
    owner, leaf = _owner(root, target)
    owner.add_module(leaf, module)


# ----------------------------------------------------------------------------- JSON text


def _dumps(value: Any) -> str:
    # allow_nan=False: non-finite floats must already be {"float": ...}.
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def _block(items: Sequence[Any]) -> str:
    return "[\n" + ",\n".join(_dumps(i) for i in items) + "\n]" if items else "[]"


def dumps_graph(doc: Mapping[str, Any]) -> str:
    """Canonical JSON text, byte for byte what the C++ writer (ir/json_format.cc) emits.

    Header keys in format order, each on its own line; each process group, input, output and
    node on its own line; object keys sorted; no spaces; shortest round-trip floats; "outputs"
    and "meta" left out when empty:

        {
        "format":"jointfx.graph",
        "version":1,
        "process_groups":[
        {"name":"0","ranks":[0,1],"size":2}
        ],
        "inputs":[ ... ],
        "outputs":[ ... ],
        "meta":{...},
        "nodes":[
        {"args":[],...},
        ...
        ]
        }
    """
    extra = sorted(k for k in doc if k not in _HEADER_KEYS and k != "nodes")
    if extra:
        raise ExportError(f"unknown header keys {extra}")
    parts = [
        f'"format":{_dumps(doc["format"])}',
        f'"version":{_dumps(doc["version"])}',
        f'"process_groups":{_block(doc.get("process_groups", []))}',
        f'"inputs":{_block(doc.get("inputs", []))}',
    ]
    if doc.get("outputs"):
        parts.append(f'"outputs":{_block(doc["outputs"])}')
    if doc.get("constants"):
        parts.append(f'"constants":{_block(doc["constants"])}')
    if doc.get("meta"):
        parts.append(f'"meta":{_dumps(doc["meta"])}')
    parts.append(f'"nodes":{_block(doc["nodes"])}')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_graph(doc: Mapping[str, Any], path: str | Path) -> None:
    """Writes canonical JSON atomically (temp file + rename), so readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dumps_graph(doc), encoding="utf-8")
    tmp.replace(path)


def load_graph(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))
