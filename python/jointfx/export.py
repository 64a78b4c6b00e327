"""torch.fx <-> jointfx JSON interchange format, version 1 (docs/graph-format.md).

export_graph(gm, ...) -> dict       every node, typed args, tensor meta, typed node meta, phase
import_graph(doc) -> GraphModule    the same nodes, names, targets, args, kwargs and meta
dumps_graph(doc) -> str             canonical JSON text (what the C++ writer emits)

docs/pytorch-bridge.md says which FX meta keys are kept, dropped or derived, and the phase rules.
"""

from __future__ import annotations

import enum
import json
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import fx

FORMAT = "jointfx.graph"
VERSION = 1

InputKind = Literal["parameter", "buffer", "user_input"]
OutputKind = Literal["loss", "gradient", "buffer_mutation", "other"]
Phase = Literal["forward", "loss", "backward"]
PHASES = ("forward", "loss", "backward")

# Header keys in canonical order (docs/graph-format.md).
_HEADER_KEYS = ("format", "version", "process_groups", "inputs", "outputs", "meta")

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
    """A SymInt/SymBool/SymFloat with a known value made concrete (fake tracing has none)."""
    try:
        return int(x)
    except Exception:  # noqa: BLE001 - unbacked symbols raise various errors
        return None


def arg_to_json(value: Any, node_name: str) -> Any:
    """One FX argument -> JSON (docs/graph-format.md "Arguments")."""
    if value is None or isinstance(value, (bool, str)):
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
        return True, {
            "device": str(val.device),
            "dtype": str(val.dtype).removeprefix("torch."),
            "shape": [int(s) for s in val.shape],
            "stride": [int(s) for s in val.stride()],
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
            with self.mode:
                return torch.empty_strided(meta["shape"], meta["stride"],
                                           dtype=_parse_dtype(meta["dtype"]),
                                           device=torch.device(meta["device"]))
        return meta


# ----------------------------------------------------------------------------- node meta


def _is_json_value(value: Any) -> bool:
    """Plain JSON data only (finite floats, string keys): what other meta may carry."""
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
    meta = node.meta
    out: dict[str, Any] = {}
    if "val" in meta:
        ok, val = val_to_json(meta["val"])
        if ok:
            out["val"] = val
    if phase is not None:
        out["phase"] = phase
    recompute = _enum_int(meta.get("recompute"))
    if recompute is not None:
        out["recompute"] = recompute
    for key in ("ac_graph_id", "seq_nr"):
        if isinstance(meta.get(key), int) and not isinstance(meta.get(key), bool):
            out[key] = meta[key]
    if include_stack_trace and isinstance(meta.get("stack_trace"), str):
        out["stack_trace"] = meta["stack_trace"]
    custom = meta.get("custom")
    if isinstance(custom, dict) and custom and _is_json_value(custom):
        out["custom"] = custom
    for key, value in meta.items():
        if key in _TYPED_META or key in _DROPPED_META or key in out:
            continue
        if _is_json_value(value):
            out[key] = value
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
       from the first of them to the loss output in program order;
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
    return {n for n in nodes if start <= order[n] <= end and n not in backward}


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
) -> dict[str, Any]:
    """A GraphModule -> the JSON v1 document (a dict; dumps_graph writes it).

    inputs: one spec per placeholder in order (default: all user_input); outputs: one per element
    of the output list (default: all "other"). Header arguments left out fall back to what
    import_graph stored on the module, so export(import(doc)) == doc.
    """
    stored = gm.meta.get(GM_META_KEY, {}) if hasattr(gm, "meta") else {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    pgs = [_as_spec(ProcessGroupSpec, p) for p in
           (process_groups if process_groups is not None else stored.get("process_groups", []))]
    in_specs = [_as_spec(InputSpec, s) for s in
                (inputs if inputs is not None else stored.get("inputs", []))]
    if not in_specs:
        in_specs = [InputSpec("user_input")] * len(placeholders)
    if len(in_specs) != len(placeholders):
        raise ExportError(f"{len(in_specs)} input specs for {len(placeholders)} placeholders")
    out_values = _output_values(gm.graph)
    out_specs = [_as_spec(OutputSpec, s) for s in
                 (outputs if outputs is not None else stored.get("outputs", []))]
    if not out_specs:
        out_specs = [OutputSpec("other")] * len(out_values)
    if len(out_specs) != len(out_values):
        raise ExportError(f"{len(out_specs)} output specs for {len(out_values)} outputs")
    meta = dict(graph_meta if graph_meta is not None else stored.get("meta", {}))
    if not _is_json_value(meta):
        raise ExportError("graph_meta must be plain JSON data")

    buffer_fqns = {s.fqn for s in in_specs if s.kind == "buffer"}
    for i, spec in enumerate(out_specs):
        if spec.kind == "buffer_mutation" and spec.fqn not in buffer_fqns:
            raise ExportError(f"output {i} (buffer_mutation) names {spec.fqn!r}, which is no "
                              "buffer input")
    param_names = {n.name for n, s in zip(placeholders, in_specs) if s.kind == "parameter"}
    phases = _phases(gm.graph, out_specs, param_names)
    nodes = [_node_to_json(n, phases.get(n), include_stack_trace) for n in gm.graph.nodes]
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "process_groups": [p.to_json() for p in pgs],
        "inputs": [s.to_json(n.name) for n, s in zip(placeholders, in_specs)],
        "outputs": [s.to_json() for s in out_specs],
        "meta": meta,
        "nodes": nodes,
    }
    return doc


def _output_values(graph: fx.Graph) -> list[Any]:
    out = graph.output_node()
    values = out.args[0] if out.args else []
    return list(values) if isinstance(values, (list, tuple)) else [values]


def _node_to_json(node: fx.Node, phase: str | None, include_stack_trace: bool) -> dict[str, Any]:
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
        "target": target_name(node),
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
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    vals = _ValFactory()
    for index, nd in enumerate(doc["nodes"]):
        name = nd.get("name", f"#{index}")
        try:
            env[name] = _import_node(graph, nd, env, vals)
        except ExportError:
            raise
        except Exception as e:
            raise ExportError(f"/nodes/{index} (node {name}): {e}") from e
    root = torch.nn.Module()
    for node in graph.nodes:
        if node.op == "get_attr":
            # Attribute values are not part of the format: stand in zeros of the recorded shape.
            _set_attr_placeholder(root, str(node.target), node.meta.get("val"))
    gm = fx.GraphModule(root, graph)
    gm.meta[GM_META_KEY] = {
        "process_groups": [dict(p) for p in doc.get("process_groups", [])],
        "inputs": [dict(i) for i in doc.get("inputs", [])],
        "outputs": [dict(o) for o in doc.get("outputs", [])],
        "meta": dict(doc.get("meta", {})),
    }
    return gm


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


def _import_meta(meta: Mapping[str, Any], vals: _ValFactory) -> dict[str, Any]:
    from torch.utils.checkpoint import CheckpointPolicy

    out: dict[str, Any] = {}
    for key, value in meta.items():
        if key == "val":
            out["val"] = vals.make(value)
        elif key == "phase":
            out["phase"] = value
            if value == "backward":
                out["autograd_backward"] = True
        elif key == "recompute":
            out["recompute"] = CheckpointPolicy(value)
        elif key == "custom":
            out["custom"] = dict(value)
        else:
            out[key] = value
    return out


def _set_attr_placeholder(root: torch.nn.Module, target: str, val: Any) -> None:
    value = torch.zeros(val.shape, dtype=val.dtype) if isinstance(val, torch.Tensor) else None
    owner = root
    *path, leaf = target.split(".")
    for part in path:
        if not hasattr(owner, part):
            owner.add_module(part, torch.nn.Module())
        owner = getattr(owner, part)
    owner.register_buffer(leaf, value)


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
