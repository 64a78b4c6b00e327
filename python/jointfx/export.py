"""torch.fx <-> jointfx JSON interchange format, version 1 (docs/graph-format.md).

export_graph(gm, ...) -> dict       every node, typed args, tensor meta, typed node meta, phase
import_graph(doc) -> GraphModule    the same nodes, names, targets, args, kwargs and meta
dumps_graph(doc) -> str             canonical JSON text (what the C++ writer emits)
grad_mode(gm)                       the grad mode to run a joint graph in (torch.no_grad or not)

docs/pytorch-bridge.md says which FX meta keys are kept, dropped or derived, and the phase rules.
"""

from __future__ import annotations

import builtins
import ctypes
import enum
import functools
import json
import keyword
import math
import operator
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
#   jointfx_doc_name, jointfx_doc_target  import_graph's record of a renamed name (below)
_DROPPED_META = frozenset({
    "tensor_meta", "eager_input_vals", "original_aten", "nn_module_stack", "source_fn_stack",
    "fwd_nn_module_stack", "fwd_source_fn_stack", "from_node", "torch_fn", "grapharg",
    "example_value", "unbacked_bindings", "autograd_backward", "jointfx_doc_name",
    "jointfx_doc_target",
})
# A document's name that torch.fx's generated code cannot use as it is, kept by import_graph so
# that export_graph writes it back: a node's name (torch.fx renames `sum` to `sum_1`) and a
# placeholder's target (forward()'s parameter, renamed where it would shadow a name the code
# uses: `inf`, `torch`).
_DOC_NAME_META = "jointfx_doc_name"
_DOC_TARGET_META = "jointfx_doc_target"
# The importer keeps header facts here so that export_graph(import_graph(doc)) == doc.
GM_META_KEY = "jointfx"


class ExportError(ValueError):
    """A graph that cannot be written, or a document that cannot be read, with the place named
    (a JSON pointer and the node: "at /nodes/3/args/0 (node 'mm'): ...")."""


# ----------------------------------------------------------------------------- names are data

_KEYWORDS = frozenset(keyword.kwlist)


def is_identifier(name: Any) -> bool:
    """A Python identifier by the format's rule (docs/graph-format.md, "Names are data"; the C++
    verifier's rule `identifier`): ASCII letters, digits and '_', not starting with a digit, not
    a keyword. Node names, placeholder targets and kwargs keys must be one: torch.fx writes them
    into the Python source it generates for a graph, so anything else could be code."""
    return type(name) is str and name.isascii() and name.isidentifier() and name not in _KEYWORDS


def is_attribute_path(target: Any) -> bool:
    """Identifiers or decimal numbers (nn.Sequential's `layers.0.weight`) joined by '.': what a
    get_attr target must be (torch.fx writes `self.layers` or `getattr(self, "0")`)."""
    return type(target) is str and all(
        is_identifier(p) or (p.isascii() and p.isdigit()) for p in target.split("."))


# Names the code torch.fx generates uses that its own namespace does not reserve: `self` (the
# module) and `Opaque` (an Opaque argument is written as its repr, `Opaque(type=..., repr=...)`).
# A node or placeholder of that name would stand in for them. FX renames nodes named after
# builtins (`exec` -> `exec_1`), which import_graph refuses like any renamed node.
_RESERVED_NAMES = frozenset({"self", "Opaque"})


@functools.lru_cache(maxsize=1)
def fx_code_names() -> frozenset[str]:
    """The names the code torch.fx generates for a module may refer to: Python's builtins and
    keywords, and the globals torch.fx defines for every graph (`inf`, `nan`, `torch`, `device`,
    ...), read from torch.fx itself. A placeholder target among them would be a forward()
    parameter that shadows it."""
    globals_ = fx.Graph().python_code(root_module="self").globals
    return frozenset(globals_) | frozenset(dir(builtins)) | _KEYWORDS


def _shown(value: Any) -> str:
    """`value` quoted for a message: repr, cut to 80 characters (a value may be any length)."""
    if not isinstance(value, str):
        text = repr(value)
        return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"
    if len(value) <= 80:
        return repr(value)
    return f"{value[:80]!r}... ({len(value)} characters)"


def _describe(value: Any) -> str:
    """What a JSON value is, for "expected X, got Y"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"the integer {value}" if abs(value) < 10**20 else "an integer"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_shown(value)}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return f"a Python {type(value).__name__}"


def _key(key: Any) -> str:
    """One JSON pointer step (RFC 6901: ~ and / escaped), cut after 80 characters: a key may
    be any length, and the message quotes it itself."""
    step = str(key)
    step = step if len(step) <= 80 else step[:80] + "..."
    return step.replace("~", "~0").replace("/", "~1")


def _error(at: str, node: Any, message: str) -> ExportError:
    """ExportError("at /nodes/3/args/0 (node 'mm'): message")."""
    where = f"at {at or '/'}"
    if node is not None:
        where += f" (node {_shown(node)})"
    return ExportError(f"{where}: {message}")


class _Bad(Exception):
    """A problem inside a value, raised with the path below the value; the caller adds where the
    value is and which node holds it (_error)."""

    def __init__(self, message: str, *path: Any) -> None:
        super().__init__(message)
        self.message = message
        self.path = list(path)

    def at(self, base: str) -> str:
        return base + "".join("/" + _key(p) for p in reversed(self.path))


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


# The operator functions torch.fx itself records: those it prints as Python operators
# (torch.fx.graph's magic_methods and inplace_methods: `operator.getitem` in every multi-output
# graph, arithmetic and comparisons on sizes in symbolic-shape graphs, the in-place forms Dynamo
# records) and the unary ones symbolic shapes use (torch.fx.experimental.sym_node's
# METHOD_TO_OPERATOR). None of them reads an attribute by name or calls an object it is given, so
# no chain of them reaches code; attrgetter, methodcaller and call would.
_OPERATOR_TARGETS = (
    "add", "sub", "mul", "floordiv", "truediv", "mod", "pow", "lshift", "rshift", "and_", "or_",
    "xor", "getitem", "matmul", "eq", "ne", "lt", "gt", "le", "ge", "pos", "neg", "invert",
    "iadd", "iand", "ifloordiv", "ilshift", "imod", "imul", "imatmul", "ior", "ipow", "irshift",
    "isub", "itruediv", "ixor", "setitem", "abs", "not_", "truth",
)
# The plain functions symbolic-shape tracing records on sizes (METHOD_TO_OPERATOR's others and
# the torch.sym_* functions make_fx emits), by the names target_name gives them.
_PYTHON_TARGETS = (
    "math.ceil", "math.floor", "math.trunc", "builtins.round", "torch.sym_float", "torch.sym_int",
    "torch.sym_max", "torch.sym_min", "torch.sym_not", "torch.sym_ite", "torch.sym_sum",
    *(f"torch._sym_{f}" for f in ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin",
                                  "acos", "atan", "log2")),
)


def _operator_arity(fn: Any) -> int | None:
    """The operands torch.fx's code generator prints for `fn` when it writes it as a Python
    operator (torch.fx.graph's magic_methods and inplace_methods: `{} + {}`), else None."""
    if getattr(fn, "__module__", None) != "_operator":
        return None
    from torch.fx.graph import inplace_methods, magic_methods

    form = magic_methods.get(fn.__name__) or inplace_methods.get(fn.__name__)
    return None if form is None else form.count("{}")


@functools.cache
def _python_targets() -> dict[str, Any]:
    """The allowed targets that are not torch operators, by name -> the callable."""
    modules = {"math": math, "builtins": builtins, "torch": torch}
    out: dict[str, Any] = {}
    for name in _PYTHON_TARGETS:
        module, _, attr = name.partition(".")
        fn = getattr(modules[module], attr, None)
        if callable(fn):  # this torch may lack one of them
            out[name] = fn
    for attr in _OPERATOR_TARGETS:
        out[f"operator.{attr}"] = getattr(operator, attr)
    return out


def _torch_operator(parts: list[str]) -> Any:
    """torch.ops' operator of `parts` (["aten", "mm", "default"], ["aten", "mm"],
    ["higher_order", "cond"]) or None. Every step is checked by type: torch.ops and its
    namespaces have attributes that are no operators (`torch.ops.load_library`,
    `torch.ops.import_module`) and would run code if called."""
    try:
        if parts[0] == "higher_order":
            op = getattr(torch.ops.higher_order, parts[1]) if len(parts) == 2 else None
            return op if isinstance(op, torch._ops.HigherOrderOperator) else None
        namespace = getattr(torch.ops, parts[0])
        if not isinstance(namespace, torch._ops._OpNamespace):
            return None
        packet = getattr(namespace, parts[1])
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            return None
        if len(parts) == 2:
            return packet
        op = getattr(packet, parts[2])
        return op if isinstance(op, torch._ops.OpOverload) else None
    except (AttributeError, RuntimeError):
        return None


def resolve_target(name: str, node_name: str = "?") -> Any:
    """The format's target string -> the callable FX stores (inverse of target_name), for the
    targets a graph file may name (docs/graph-format.md, "Targets"): torch operators (`ns.op` and
    `ns.op.overload` of any torch.ops namespace, `higher_order.name`), the operator functions
    torch.fx records (_OPERATOR_TARGETS) and the symbolic-shape functions (_PYTHON_TARGETS).
    Anything else (`builtins.exec`, `builtins.getattr`, an attribute of torch.ops that is no
    operator) is an ExportError: a graph file is data, and calling those runs code."""
    if type(name) is not str:
        raise ExportError(f"node {node_name}: expected a target string, got {_describe(name)}")
    fn = _python_targets().get(name)
    if fn is not None:
        return fn
    parts = name.split(".")
    # Operator names are identifiers; dunders are Python's attributes, never an operator's.
    if 2 <= len(parts) <= 3 and all(is_identifier(p) and not p.startswith("__") for p in parts):
        op = _torch_operator(parts)
        if op is not None:
            return op
    raise ExportError(
        f"node {node_name}: unknown target {_shown(name)}: a graph may call the torch operators "
        "this torch has (aten.*, other torch.ops namespaces, higher_order.*), the operator "
        "functions torch.fx records and the symbolic-shape functions, nothing else "
        "(docs/graph-format.md, \"Targets\")")


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


# The names a document may give each torch type: fixed tables, so that no name from a file is
# ever looked up as an attribute (getattr(torch, name) would import torch's lazy submodules).
_DTYPES = {k: v for k, v in vars(torch).items() if isinstance(v, torch.dtype)}
_DTYPES.update({f"torch.{k}": v for k, v in _DTYPES.items()})  # as the C++ reader takes them
_LAYOUTS = {str(v).removeprefix("torch."): v for v in vars(torch).values()
            if isinstance(v, torch.layout)}
_MEMORY_FORMATS = {str(v).removeprefix("torch."): v for v in vars(torch).values()
                   if isinstance(v, torch.memory_format)}


def _parse_dtype(name: str) -> torch.dtype:
    dtype = _DTYPES.get(name) if type(name) is str else None
    if dtype is None:
        raise ExportError(f"unknown dtype {_shown(name)}")
    return dtype


def _parse_layout(name: str) -> torch.layout:
    layout = _LAYOUTS.get(name.removeprefix("torch.")) if type(name) is str else None
    if layout is None:
        raise ExportError(f"unknown layout {_shown(name)}")
    return layout


def _parse_memory_format(name: str) -> torch.memory_format:
    fmt = _MEMORY_FORMATS.get(name.removeprefix("torch.")) if type(name) is str else None
    if fmt is None:
        raise ExportError(f"unknown memory format {_shown(name)}")
    return fmt


def _parse_device(name: Any) -> torch.device:
    if type(name) is not str:
        raise _Bad(f"expected a device string, got {_describe(name)}")
    try:
        return torch.device(name)
    except (RuntimeError, ValueError, TypeError) as e:
        raise _Bad(f"bad device {_shown(name)}: {str(e).splitlines()[0] if str(e) else e}") \
            from None


_FLOAT_WORDS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# Deeper JSON nesting is refused, as the C++ readers refuse it (docs/graph-format.md "Errors");
# the document is level 1, the nodes array 2, a node 3, its args 4.
_MAX_DEPTH = 200
_ARG_KINDS = "node, tuple, float, dtype, device, layout, memory_format or opaque"


def _int64(value: int) -> int:
    if _INT64_MIN <= value <= _INT64_MAX:
        return value
    raise _Bad(f"integer {value} is out of the int64 range")


def _nonfinite(value: float) -> _Bad:
    word = "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    return _Bad(f"a non-finite number ({value!r}) has no JSON form: the format writes it "
                f'{{"float": "{word}"}}')


_NOT_SCALAR = object()


def _scalar(value: Any) -> Any:
    """A JSON scalar of an argument or a value meta (null, true, false, an int64, a finite
    float) as it is; _NOT_SCALAR for anything else (strings are the caller's: only arguments
    take them)."""
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is int:
        return _int64(value)
    if kind is float:
        if math.isfinite(value):
            return value
        raise _nonfinite(value)
    return _NOT_SCALAR


def _check_depth(level: int) -> None:
    if level > _MAX_DEPTH:
        raise _Bad(f"nesting deeper than {_MAX_DEPTH} levels")


def _each(items: list, convert: Callable[[Any], Any]) -> list:
    """convert(item) for each item; a _Bad from one gets the item's index on its path."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append(convert(item))
        except _Bad as e:
            e.path.append(i)
            raise
    return out


def _arg(value: Any, env: Mapping[str, fx.Node], level: int) -> Any:
    """One JSON argument -> FX; a malformed one raises _Bad with the path below it."""
    if type(value) is str:
        _check_unicode(value)
        return value
    if (scalar := _scalar(value)) is not _NOT_SCALAR:
        return scalar
    _check_depth(level)
    if type(value) is list:
        return _each(value, lambda v: _arg(v, env, level + 1))
    if not isinstance(value, Mapping) or len(value) != 1:
        raise _Bad("expected an argument (null, true, false, a number, a string, an array, or an "
                   f"object with one key: {_ARG_KINDS}), got "
                   + (f"an object with {len(value)} keys" if isinstance(value, Mapping)
                      else _describe(value)))
    (key, inner), = value.items()
    try:
        return _arg_object(key, inner, env, level + 1)
    except _Bad as e:
        e.path.append(key)
        raise


def _arg_object(key: Any, inner: Any, env: Mapping[str, fx.Node], level: int) -> Any:
    if key == "node":
        if type(inner) is not str:
            raise _Bad(f"expected a node name, got {_describe(inner)}")
        node = env.get(inner)
        if node is None:
            raise _Bad(f"argument names unknown or later node {_shown(inner)} (a node can only "
                       "refer to nodes defined before it)")
        return node
    if key == "tuple":
        if type(inner) is not list:
            raise _Bad(f"expected the tuple's items (an array), got {_describe(inner)}")
        return tuple(_arg(inner, env, level))
    if key == "float":
        if type(inner) is not str or inner not in _FLOAT_WORDS:
            raise _Bad(f'expected "inf", "-inf" or "nan", got {_describe(inner)}')
        return _FLOAT_WORDS[inner]
    if key == "dtype":
        dtype = _DTYPES.get(inner) if type(inner) is str else None
        if dtype is None:
            raise _Bad(f"unknown dtype {_describe(inner)}")
        return dtype
    if key == "device":
        return _parse_device(inner)
    if key == "layout":
        layout = _LAYOUTS.get(inner.removeprefix("torch.")) if type(inner) is str else None
        if layout is None:
            raise _Bad(f"unknown layout {_describe(inner)}")
        return layout
    if key == "memory_format":
        fmt = (_MEMORY_FORMATS.get(inner.removeprefix("torch.")) if type(inner) is str
               else None)
        if fmt is None:
            raise _Bad(f"unknown memory format {_describe(inner)}")
        return fmt
    if key == "opaque":
        if (not isinstance(inner, Mapping) or set(inner) != {"repr", "type"}
                or type(inner["repr"]) is not str or type(inner["type"]) is not str):
            raise _Bad('expected {"repr": "...", "type": "..."} (two strings), got '
                       + _describe(inner))
        return Opaque(type=inner["type"], repr=inner["repr"])
    raise _Bad(f"unknown argument object key {_shown(key)} (expected {_ARG_KINDS})")


def arg_from_json(value: Any, env: Mapping[str, fx.Node], node_name: str) -> Any:
    """JSON -> FX argument (inverse of arg_to_json); ExportError naming the node and the place
    inside the value for anything the format does not allow."""
    try:
        return _arg(value, env, 1)
    except _Bad as e:
        inside = e.at("")
        raise ExportError(f"node {node_name}: {'at ' + inside + ': ' if inside else ''}"
                          f"{e.message}") from None


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

    def make(self, meta: Any, level: int = 1) -> Any:
        """A value meta (docs/graph-format.md "Node meta") -> meta["val"]; _Bad, with the path
        below `meta`, for anything else."""
        if (scalar := _scalar(meta)) is not _NOT_SCALAR:
            return scalar
        _check_depth(level)
        if type(meta) is list:
            return tuple(_each(meta, lambda m: self.make(m, level + 1)))
        if isinstance(meta, Mapping):
            if len(meta) == 1 and "float" in meta:
                word = meta["float"]
                if type(word) is not str or word not in _FLOAT_WORDS:
                    raise _Bad(f'expected "inf", "-inf" or "nan", got {_describe(word)}', "float")
                return _FLOAT_WORDS[word]
            shape, stride, dtype, device = _tensor_meta(meta)
            return fake_tensor(self.mode, shape, stride, dtype, device)
        raise _Bad("expected a value meta (a tensor object, an array, null or a scalar), got "
                   + _describe(meta))


_TENSOR_KEYS = frozenset({"device", "dtype", "shape", "stride"})
_CPU = torch.device("cpu")


def _ints(value: Any, what: str, key: str) -> list[int]:
    if type(value) is not list:
        raise _Bad(f"expected {what} (an array of integers), got {_describe(value)}", key)
    for i, v in enumerate(value):
        if type(v) is not int:
            raise _Bad(f"expected an integer, got {_describe(v)}", i, key)
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise _Bad(f"integer {v} is out of the int64 range", i, key)
    return value


def _tensor_meta(meta: Mapping[str, Any]) -> tuple[list[int], list[int], torch.dtype,
                                                   torch.device]:
    """A tensor value meta's (shape, stride, dtype, device), with the format's defaults: stride
    contiguous, device cpu (the format's "no device"). Its sizes must fit int64, as the C++
    readers require (docs/graph-format.md "Sizes")."""
    extra = [k for k in meta if k not in _TENSOR_KEYS]
    if extra:
        raise _Bad(f"unexpected key {_shown(extra[0])} in a tensor meta (expected device, dtype, "
                   "shape, stride)", extra[0])
    if "dtype" not in meta:
        raise _Bad("missing key 'dtype' (a tensor meta needs a dtype)")
    dtype = _DTYPES.get(meta["dtype"]) if type(meta["dtype"]) is str else None
    if dtype is None:
        raise _Bad(f"unknown dtype {_describe(meta['dtype'])}", "dtype")
    if "shape" not in meta:
        raise _Bad("missing key 'shape' (a tensor meta needs a shape)")
    shape = _ints(meta["shape"], "the shape", "shape")
    if "stride" in meta:
        stride = _ints(meta["stride"], "the stride", "stride")
        if len(stride) != len(shape):
            raise _Bad(f"stride has {len(stride)} dimensions but shape has {len(shape)}", "stride")
    else:
        stride = _contiguous_stride(shape)
    problem = _size_problem(shape, stride if "stride" in meta else None, dtype.itemsize)
    if problem:
        raise _Bad(problem, "shape")
    device = _CPU
    if "device" in meta:
        try:
            device = _parse_device(meta["device"])
        except _Bad as e:
            e.path.append("device")
            raise
    return shape, stride, dtype, device


def _contiguous_stride(shape: Sequence[int]) -> list[int]:
    stride, s = [], 1
    for d in reversed(shape):
        stride.append(s)
        s *= max(d, 1)
    return stride[::-1]


def _size_problem(shape: Sequence[int], stride: Sequence[int] | None, itemsize: int) -> str:
    """TensorMeta::sizeProblem (ir/types.cc): what makes a tensor meta one PyTorch could not
    make, or ""."""
    for i, d in enumerate(shape):
        if d < 0:
            return f"dimension {i} of shape {list(shape)} is negative"
    for i, s in enumerate(stride or ()):
        if s < 0:
            return f"stride {i} of {list(stride or ())} is negative (PyTorch has no negative strides)"
    n = 1
    for d in shape:  # in order, as C++ multiplies: an overflow before a 0 still overflows
        n *= d
        if n > _INT64_MAX:
            return f"shape {list(shape)}: the number of elements overflows int64"
    s = 1
    for d in reversed(shape[1:]):
        s *= max(d, 1)
        if s > _INT64_MAX:
            return f"shape {list(shape)}: the contiguous strides overflow int64"
    if n * itemsize > _INT64_MAX:
        return f"shape {list(shape)}: the size in bytes overflows int64"
    if n > 0 and stride is not None:
        extent = 1 + sum((d - 1) * st for d, st in zip(shape, stride))
        if extent * itemsize > _INT64_MAX:
            return (f"shape {list(shape)} with stride {list(stride)}: the storage it spans "
                    "overflows int64 bytes")
    return ""


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
    _restore_document_names(gm.graph, head)
    return head


def _restore_document_names(graph: fx.Graph, doc: dict[str, Any]) -> None:
    """Gives the nodes import_graph renamed (_DOC_NAME_META, _DOC_TARGET_META) their document
    names back in `doc`: node names, references to them, placeholder targets, input specs. A name
    a node of the graph has meanwhile taken stays as torch.fx has it."""
    names = {n.name: n.meta[_DOC_NAME_META] for n in graph.nodes if _DOC_NAME_META in n.meta}
    targets = {n.name: n.meta[_DOC_TARGET_META] for n in graph.find_nodes(op="placeholder")
               if _DOC_TARGET_META in n.meta}
    if not names and not targets:
        return
    taken = {n.name for n in graph.nodes}
    names = {fx_name: doc_name for fx_name, doc_name in names.items() if doc_name not in taken}

    def fix(v: Any) -> Any:
        if isinstance(v, list):
            return [fix(x) for x in v]
        if isinstance(v, dict):
            if v.keys() == {"node"}:
                return {"node": names.get(v["node"], v["node"])}
            return {k: fix(x) for k, x in v.items()}
        return v

    for nd in doc["nodes"]:
        if nd["op"] == "placeholder" and nd["name"] in targets:
            nd["target"] = targets[nd["name"]]
        nd["name"] = names.get(nd["name"], nd["name"])
        nd["args"] = fix(nd["args"])
        nd["kwargs"] = fix(nd["kwargs"])
    for spec in doc.get("inputs", []):
        spec["name"] = names.get(spec["name"], spec["name"])


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
    if schemas := op_schemas(gm.graph):
        meta["op_schemas"] = {**meta.get("op_schemas", {}), **schemas}

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

# The namespaces jointfx's op table is generated from (scripts/gen_op_table.py): their ops'
# facts are known; an op of any other namespace is a custom op whose schema the graph carries.
TABLE_NAMESPACES = frozenset({"aten", "prims", "_c10d_functional", "_c10d_functional_autograd"})


def op_schemas(graph: fx.Graph) -> dict[str, dict[str, Any]]:
    """Graph meta "op_schemas" (docs/graph-format.md): for each custom op the graph calls (an
    OpOverload outside TABLE_NAMESPACES: torchtitan's deterministic_scatter_add, a user's
    torch.library op), its registered schema and whether it draws random numbers, so the passes
    know what it writes and aliases rather than assuming it writes every operand."""
    out: dict[str, dict[str, Any]] = {}
    for n in graph.nodes:
        t = n.target
        if (n.op != "call_function" or not isinstance(t, torch._ops.OpOverload)
                or t.namespace in TABLE_NAMESPACES or str(t) in out):
            continue
        out[str(t)] = {"schema": str(t._schema),
                       "random": torch.Tag.nondeterministic_seeded in t.tags}
    return dict(sorted(out.items()))


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

_HEADER_EXPECTED = "format, version, process_groups, inputs, outputs, constants, meta, nodes"
_NODE_KEYS = ("args", "kwargs", "meta", "name", "op", "target")
_OPS = ("placeholder", "call_function", "get_attr", "output")
_INPUT_KINDS = ("parameter", "buffer", "user_input", "mesh", "opaque", "none")
_OUTPUT_KINDS = ("loss", "gradient", "buffer_mutation", "other", "mesh", "opaque")
_SUBGRAPH_KEYS = ("constants", "nodes", "returns", "subgraphs")
_IDENTIFIER_RULE = ("ASCII letters, digits and '_', not starting with a digit, not a Python "
                    "keyword (docs/graph-format.md, \"Names are data\")")


def import_graph(doc: Mapping[str, Any]) -> fx.GraphModule:
    """The JSON v1 document -> a GraphModule with the same nodes, names, targets, args, kwargs
    and meta. meta["val"] becomes FakeTensors; phase is kept as meta["phase"] and backward also
    sets meta["autograd_backward"]; recompute becomes a CheckpointPolicy.

    A document is data: names and keys that torch.fx writes into the module's Python source must
    be identifiers and call_function targets resolve only to operators (resolve_target), so
    nothing in it can run code. Anything the format does not allow is an ExportError naming the
    place: "at /nodes/3/args/0 (node 'mm'): ..."."""
    if not isinstance(doc, Mapping):
        raise _error("", None, f"expected a JSON object (a jointfx graph), got {_describe(doc)}")
    for key in doc:
        if key not in _HEADER_KEYS and key != "nodes":
            raise _error("/" + _key(key), None, f"unexpected header key {_shown(key)} (expected "
                         f"{_HEADER_EXPECTED})")
    if doc.get("format") != FORMAT:
        raise _error("/format", None, f"not a jointfx graph (format {_shown(doc.get('format'))}"
                     f", expected {FORMAT!r})")
    version = doc.get("version")
    if type(version) is not int or version != VERSION:
        raise _error("/version", None, f"unsupported version {_shown(version)} (this reader: "
                     f"{VERSION})")
    header = _import_header(doc)
    subgraphs = header["meta"].get(SUBGRAPHS_KEY, {})
    if not isinstance(subgraphs, Mapping):
        raise _error(f"/meta/{SUBGRAPHS_KEY}", None, "expected the subgraphs by get_attr target "
                     f"(an object), got {_describe(subgraphs)}")
    gm = _import_module(doc, subgraphs, _ValFactory(), "", 1)
    placeholders = {nd["name"] for nd in doc["nodes"] if nd["op"] == "placeholder"}
    for i, spec in enumerate(header["inputs"]):
        if spec["name"] not in placeholders:
            raise _error(f"/inputs/{i}/name", None, f"input {_shown(spec['name'])} names no "
                         "placeholder")
    gm.meta[GM_META_KEY] = header
    return gm


def _import_header(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The header's process groups, inputs, outputs and graph meta, checked (ir/json/reader.cc
    reads the same rules), for gm.meta["jointfx"]. Constants are checked where they are used."""

    def records(key: str, what: str, keys: tuple[str, ...], check: Any) -> list[dict[str, Any]]:
        items = doc.get(key, [])
        article = "an" if what[0] in "aeiou" else "a"
        if type(items) is not list:
            raise _error(f"/{key}", None, f"expected an array of {what}s, got {_describe(items)}")
        out = []
        for i, item in enumerate(items):
            at = f"/{key}/{i}"
            if not isinstance(item, Mapping):
                raise _error(at, None, f"expected {article} {what} object, got {_describe(item)}")
            for k in item:
                if k not in keys:
                    raise _error(f"{at}/{_key(k)}", None, f"unexpected key {_shown(k)} in "
                                 f"{article} {what} (expected {', '.join(keys)})")
            try:
                check(item)
            except _Bad as e:
                raise _error(e.at(at), None, e.message) from None
            out.append(dict(item))
        return out

    def string(item: Mapping[str, Any], key: str, what: str, required: bool = True) -> None:
        if key not in item:
            if required:
                raise _Bad(f"missing key '{key}' ({what})")
            return
        if type(item[key]) is not str:
            raise _Bad(f"expected {what} (a string), got {_describe(item[key])}", key)

    group_names: set[str] = set()

    def group(pg: Mapping[str, Any]) -> None:
        string(pg, "name", "the group_name collectives carry")
        if pg["name"] in group_names:
            raise _Bad(f"duplicate process group {_shown(pg['name'])}", "name")
        group_names.add(pg["name"])
        if "size" not in pg:
            raise _Bad("missing key 'size' (the group size)")
        if type(pg["size"]) is not int:
            raise _Bad(f"expected the group size (an integer), got {_describe(pg['size'])}",
                       "size")
        _int64(pg["size"])
        if "ranks" in pg:
            for i, r in enumerate(_ints(pg["ranks"], "the ranks", "ranks")):
                _int64(r)

    def kind(item: Mapping[str, Any], kinds: tuple[str, ...]) -> None:
        string(item, "kind", " or ".join(kinds))
        if item["kind"] not in kinds:
            raise _Bad(f"unknown kind {_shown(item['kind'])} (expected {', '.join(kinds)})",
                       "kind")
        string(item, "fqn", "the FQN", required=False)

    def graph_input(item: Mapping[str, Any]) -> None:
        string(item, "name", "the placeholder's name")
        kind(item, _INPUT_KINDS)

    meta = doc.get("meta", {})
    if not isinstance(meta, Mapping):
        raise _error("/meta", None, f"expected meta to be an object, got {_describe(meta)}")
    try:
        _check_json(meta, 2)
    except _Bad as e:
        raise _error(e.at("/meta"), None, e.message) from None
    return {
        "process_groups": records("process_groups", "process group", ("name", "ranks", "size"),
                                  group),
        "inputs": records("inputs", "input", ("fqn", "kind", "name"), graph_input),
        "outputs": records("outputs", "output", ("fqn", "kind"),
                           lambda item: kind(item, _OUTPUT_KINDS)),
        "meta": dict(meta),
    }


def _check_unicode(text: str) -> None:
    """A Python str may hold a lone surrogate ("\\ud800" in a JSON file reads as one), which
    has no UTF-8 form: the C++ reader refuses it, and writing it would fail half way."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _Bad(f"a string that is not valid Unicode (a lone surrogate at character "
                       f"{e.start}: {_shown(text)})") from None


def _check_json(value: Any, level: int) -> None:
    """Plain JSON data (the format carries any other meta untouched): strings, booleans, null,
    integers (any size: the C++ reader keeps the digits of one past 64 bits), finite numbers,
    arrays and objects with string keys, nested at most _MAX_DEPTH deep. _Bad with the path below
    `value` otherwise."""
    kind = type(value)
    if kind is str:
        _check_unicode(value)
        return
    if kind is bool or value is None:
        return
    if kind is int:
        return
    if kind is float:
        if not math.isfinite(value):
            raise _nonfinite(value)
        return
    if level > _MAX_DEPTH:
        raise _Bad(f"nesting deeper than {_MAX_DEPTH} levels")
    if kind is list:
        for i, v in enumerate(value):
            try:
                _check_json(v, level + 1)
            except _Bad as e:
                e.path.append(i)
                raise
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if type(k) is not str:
                raise _Bad(f"an object key must be a string, got {_describe(k)}")
            try:
                _check_json(v, level + 1)
            except _Bad as e:
                e.path.append(k)
                raise
        return
    raise _Bad(f"expected JSON data, got {_describe(value)}")


def _import_module(doc: Mapping[str, Any], subgraphs: Mapping[str, Any], vals: _ValFactory,
                   where: str, level: int) -> fx.GraphModule:
    """A GraphModule of `doc`'s nodes, its get_attr values from `doc`'s constants, else from
    `subgraphs` (GraphModules, built the same way), else zeros of the recorded shape. `where` is
    the JSON pointer of `doc` and `level` its nesting level, for errors."""
    if "nodes" not in doc:
        raise _error(where, None, "missing key 'nodes'")
    nodes = doc["nodes"]
    if type(nodes) is not list:
        raise _error(f"{where}/nodes", None, f"expected nodes to be an array, got "
                     f"{_describe(nodes)}")
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    placeholder_targets: set[str] = set()
    # Every target the document gives a placeholder: a renamed one must take none of them.
    doc_targets = {nd["target"] for nd in nodes if isinstance(nd, Mapping)
                   and nd.get("op") == "placeholder" and isinstance(nd.get("target"), str)}
    output: fx.Node | None = None
    for index, nd in enumerate(nodes):
        at = f"{where}/nodes/{index}"
        if output is not None:
            raise _error(at, nd.get("name") if isinstance(nd, Mapping) else None,
                         f"a node after the output node {_shown(output.name)}")
        node = _import_node(graph, nd, env, vals, at, level + 2, placeholder_targets,
                            doc_targets)
        env[nd["name"]] = node
        if node.op == "output":
            output = node
    if output is None:
        raise _error(f"{where}/nodes", None, "the graph has no output node")
    constants = _import_constants(doc.get("constants", []), where)
    root = torch.nn.Module()
    made: dict[str, str] = {}  # get_attr target -> what it holds, each made once
    index_of = {node.name: i for i, node in enumerate(env.values())}
    for node in graph.find_nodes(op="get_attr"):
        target = str(node.target)
        if target in made:
            continue
        at = f"{where}/nodes/{index_of[node.name]}/target"
        if target in constants:
            made[target] = "a constant"
            _set_attr(root, target, constants[target], at, node.name)
        elif target in subgraphs:
            made[target] = "a subgraph"
            sub = subgraphs[target]
            sub_at = f"{where or '/meta'}/{SUBGRAPHS_KEY}/{_key(target)}"
            if not isinstance(sub, Mapping):
                raise _error(sub_at, None, f"expected a subgraph object, got {_describe(sub)}")
            for k in sub:
                if k not in _SUBGRAPH_KEYS:
                    raise _error(f"{sub_at}/{_key(k)}", None, f"unexpected key {_shown(k)} in a "
                                 f"subgraph (expected {', '.join(_SUBGRAPH_KEYS)})")
            inner = sub.get(SUBGRAPHS_KEY, {})
            if not isinstance(inner, Mapping):
                raise _error(f"{sub_at}/{SUBGRAPHS_KEY}", None, "expected the subgraphs by "
                             f"get_attr target (an object), got {_describe(inner)}")
            module = _import_module(sub, inner, vals, sub_at, level + 3)
            _set_attr(root, target, module, at, node.name)
        else:
            # No value in the document: stand in zeros of the recorded shape.
            made[target] = "zeros"
            val = node.meta.get("val")
            value = (torch.zeros(val.shape, dtype=val.dtype) if isinstance(val, torch.Tensor)
                     else None)
            _set_attr(root, target, value, at, node.name)
    returns = doc.get("returns", "list")
    if returns not in ("list", "tuple", "value"):
        raise _error(f"{where}/returns", None, f"expected \"list\", \"tuple\" or \"value\", got "
                     f"{_describe(returns)}")
    if returns != "list":
        result = output.args[0]
        if returns == "value" and len(result) != 1:
            raise _error(f"{where}/returns", None, f"a subgraph that returns one value has "
                         f"{len(result)} outputs")
        output.args = (tuple(result) if returns == "tuple" else result[0],)
    return fx.GraphModule(root, graph)


def _import_node(graph: fx.Graph, nd: Any, env: Mapping[str, fx.Node], vals: _ValFactory,
                 at: str, level: int, placeholder_targets: set[str],
                 doc_targets: set[str]) -> fx.Node:
    """One node of the document at `at` (nesting level `level`), checked."""
    if not isinstance(nd, Mapping):
        raise _error(at, None, f"expected a node object, got {_describe(nd)}")
    for key in nd:
        if key not in _NODE_KEYS:
            raise _error(f"{at}/{_key(key)}", nd.get("name"), f"unexpected key {_shown(key)} in "
                         f"a node (expected {', '.join(_NODE_KEYS)})")
    for key in ("name", "op", "target"):
        if key not in nd:
            raise _error(at, nd.get("name"), f"missing key '{key}'")
        if type(nd[key]) is not str:
            raise _error(f"{at}/{key}", nd.get("name") if key != "name" else None,
                         f"expected the node's {key} (a string), got {_describe(nd[key])}")
    name, op, target = nd["name"], nd["op"], nd["target"]
    if not is_identifier(name) or name in _RESERVED_NAMES:
        raise _error(f"{at}/name", name, f"node name {_shown(name)} is not a Python identifier "
                     f"({_IDENTIFIER_RULE})" if name not in _RESERVED_NAMES else
                     f"node name {name!r} is reserved: torch.fx's generated code uses that name")
    if name in env:
        raise _error(f"{at}/name", name, f"duplicate node name {name!r}")
    if op not in _OPS:
        raise _error(f"{at}/op", name, f"unknown op kind {_shown(op)} (expected "
                     f"{', '.join(_OPS)})")
    raw_args = nd.get("args", [])
    if type(raw_args) is not list:
        raise _error(f"{at}/args", name, f"expected args to be an array, got "
                     f"{_describe(raw_args)}")
    raw_kwargs = nd.get("kwargs", {})
    if not isinstance(raw_kwargs, Mapping):
        raise _error(f"{at}/kwargs", name, f"expected kwargs to be an object, got "
                     f"{_describe(raw_kwargs)}")
    for key in raw_kwargs:
        if not is_identifier(key):
            raise _error(f"{at}/kwargs/{_key(key)}", name, f"kwargs key {_shown(key)} is not a "
                         f"Python identifier ({_IDENTIFIER_RULE})")
    fn: Any = target
    if op == "call_function":
        try:
            fn = resolve_target(target, name)
        except ExportError as e:
            raise _error(f"{at}/target", name, str(e).removeprefix(f"node {name}: ")) from None
        if (arity := _operator_arity(fn)) is not None and (len(raw_args) != arity or raw_kwargs):
            # torch.fx prints these as Python operators (`{}[{}]`): a missing operand failed
            # in its code generator, an extra one or a kwarg would be dropped without a word.
            raise _error(f"{at}/args", name, f"{target} takes {arity} positional argument"
                         f"{'s' if arity != 1 else ''} and no kwargs, got {len(raw_args)}"
                         f"{' and kwargs' if raw_kwargs else ''}")
    elif op == "placeholder":
        if not is_identifier(target) or target in _RESERVED_NAMES:
            raise _error(f"{at}/target", name, f"placeholder target {_shown(target)} is not a "
                         f"Python identifier ({_IDENTIFIER_RULE})" if target not in
                         _RESERVED_NAMES else f"placeholder target {target!r} is reserved: "
                         "torch.fx's generated code uses that name")
        if target in placeholder_targets:
            raise _error(f"{at}/target", name, f"placeholder target {target!r} is another "
                         "placeholder's too: forward() cannot take one parameter twice")
        placeholder_targets.add(target)
    elif op == "get_attr":
        if not is_attribute_path(target):
            raise _error(f"{at}/target", name, f"get_attr target {_shown(target)} is not an "
                         "attribute path (Python identifiers or decimal numbers joined by '.')")
    elif target != "output":
        raise _error(f"{at}/target", name, f"the output node's target must be \"output\", got "
                     f"{_shown(target)}")
    if op in ("placeholder", "get_attr") and (raw_args or raw_kwargs):
        raise _error(f"{at}/args" if raw_args else f"{at}/kwargs", name,
                     f"a {op} takes no arguments")
    if op == "output" and (len(raw_args) != 1 or type(raw_args[0]) is not list or raw_kwargs):
        raise _error(f"{at}/args", name, "the output node takes one argument, the list of the "
                     "graph's outputs")
    args: list[Any] = []
    for i, a in enumerate(raw_args):
        try:
            args.append(_arg(a, env, level + 2))
        except _Bad as e:
            raise _error(e.at(f"{at}/args/{i}"), name, e.message) from None
    kwargs: dict[str, Any] = {}
    for key, v in raw_kwargs.items():
        try:
            kwargs[key] = _arg(v, env, level + 2)
        except _Bad as e:
            raise _error(e.at(f"{at}/kwargs/{_key(key)}"), name, e.message) from None
    meta = nd.get("meta", {})
    if not isinstance(meta, Mapping):
        raise _error(f"{at}/meta", name, f"expected meta to be an object, got {_describe(meta)}")
    node_meta = _import_node_meta(meta, vals, f"{at}/meta", name, level + 1, len(args))
    # A node named after a Python builtin (`sum`, `slice`: what the C++ passes call new nodes of
    # those ops) gets torch.fx's name for it (`sum_1`); the document's name still finds it.
    node = graph.create_node(op, fn, tuple(args), kwargs, name=name)
    node.meta = node_meta
    if node.name != name:
        node.meta[_DOC_NAME_META] = name
    if op == "placeholder" and target in fx_code_names():
        # forward(self, inf) would compute x + x for `x + inf`; forward(self, torch) would break
        # every call. The parameter takes the node's own (torch.fx-legal) name instead.
        new_target = node.name
        while new_target in doc_targets:
            new_target += "_"
        doc_targets.add(new_target)
        node.target = new_target
        node.meta[_DOC_TARGET_META] = target
    return node


def _import_node_meta(meta: Mapping[str, Any], vals: _ValFactory, at: str, name: str,
                      level: int, n_args: int) -> dict[str, Any]:
    """_import_meta with every key checked (docs/graph-format.md "Node meta")."""
    out: dict[str, Any] = {}
    for key, value in meta.items():
        try:
            if key == "val":
                out["val"] = vals.make(value, level + 1)
            elif key == "phase":
                if type(value) is not str or value not in PHASES:
                    raise _Bad(f"unknown phase {_describe(value)} (expected forward, loss or "
                               "backward)")
                out["phase"] = value
                if value == "backward":
                    out["autograd_backward"] = True
            elif key == "recompute":
                if type(value) is not int or value not in _checkpoint_policies():
                    raise _Bad(f"recompute must be 0..{max(_checkpoint_policies())} "
                               f"(CheckpointPolicy), got {_describe(value)}")
                out["recompute"] = _checkpoint_policies()[value]
            elif key in ("ac_graph_id", "seq_nr"):
                # Any integer: one the typed field cannot hold (autograd's 2^64-1) is carried.
                if type(value) is not int:
                    raise _Bad(f"expected the {key} (an integer), got {_describe(value)}")
                out[key] = value
            elif key == "stack_trace":
                if type(value) is not str:
                    raise _Bad(f"expected the stack trace (a string), got {_describe(value)}")
                out[key] = value
            elif key == "custom":
                if not isinstance(value, Mapping):
                    raise _Bad(f"expected an object, got {_describe(value)}")
                if "module_fqn" in value and type(value["module_fqn"]) is not str:
                    raise _Bad(f"expected the module FQN (a string), got "
                               f"{_describe(value['module_fqn'])}", "module_fqn")
                _check_json(value, level + 1)
                out[key] = dict(value)
            elif key == "boxed_arg_indices":
                # torch.fx's code generator reads it: positions of arguments it passes boxed.
                if type(value) is not list or any(type(i) is not int or not 0 <= i < n_args
                                                  for i in value):
                    raise _Bad(f"expected positions of the node's {n_args} arguments, got "
                               f"{_shown(value)}")
                out[key] = value
            elif key == "is_wrapped":  # read by torch.fx's code generator too
                if type(value) is not bool:
                    raise _Bad(f"expected true or false, got {_describe(value)}")
                out[key] = value
            else:
                _check_json(value, level + 1)
                out[key] = value
        except _Bad as e:
            raise _error(e.at(f"{at}/{_key(key)}"), name, e.message) from None
    return out


@functools.cache
def _checkpoint_policies() -> dict[int, Any]:
    """CheckpointPolicy by value: the enum's own lookup costs a Python call per node."""
    from torch.utils.checkpoint import CheckpointPolicy

    return {p.value: p for p in CheckpointPolicy}


def _import_meta(meta: Mapping[str, Any], vals: Any) -> dict[str, Any]:
    """Node meta from the C++ library's JSON (the in-process pass adapter's new and changed
    nodes): what import_graph's _import_node_meta makes of a checked document."""
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


_CONSTANT_KEYS = ("data", "device", "dtype", "name", "shape")
_HEX = re.compile(r"(?:[0-9a-f]{2})*")


def _import_constants(items: Any, where: str) -> dict[str, torch.Tensor]:
    """The document's tensor constants by get_attr target, checked as the C++ reader checks
    them: exactly numel * itemsize bytes of lower-case hex."""
    at = f"{where}/constants"
    if type(items) is not list:
        raise _error(at, None, f"expected an array of constants, got {_describe(items)}")
    out: dict[str, torch.Tensor] = {}
    for i, c in enumerate(items):
        here = f"{at}/{i}"
        if not isinstance(c, Mapping):
            raise _error(here, None, f"expected a constant object, got {_describe(c)}")
        for k in c:
            if k not in _CONSTANT_KEYS:
                raise _error(f"{here}/{_key(k)}", None, f"unexpected key {_shown(k)} in a "
                             f"constant (expected {', '.join(_CONSTANT_KEYS)})")
        for k in ("name", "dtype", "shape", "data"):
            if k not in c:
                raise _error(here, None, f"missing key '{k}'")
        name = c["name"]
        if not is_attribute_path(name):
            raise _error(f"{here}/name", None, f"constant name {_shown(name)} is not an attribute "
                         "path (the get_attr target: identifiers or decimal numbers joined by '.')")
        if name in out:
            raise _error(f"{here}/name", None, f"duplicate constant {name!r}")
        dtype = _DTYPES.get(c["dtype"]) if type(c["dtype"]) is str else None
        if dtype is None:
            raise _error(f"{here}/dtype", None, f"unknown dtype {_describe(c['dtype'])}")
        try:
            shape = _ints(c["shape"], "the shape", "shape")
            problem = _size_problem(shape, None, dtype.itemsize)
            if problem:
                raise _Bad(problem, "shape")
        except _Bad as e:
            raise _error(e.at(here), None, e.message) from None
        if "device" in c:
            try:
                _parse_device(c["device"])
            except _Bad as e:
                raise _error(f"{here}/device", None, e.message) from None
        data = c["data"]
        if type(data) is not str or not _HEX.fullmatch(data):
            raise _error(f"{here}/data", None, "expected lower-case hex digits (two per byte)")
        numel = math.prod(shape)
        want = numel * dtype.itemsize
        if len(data) != 2 * want:
            raise _error(f"{here}/data", None, f"expected {want} bytes for {c['dtype']} "
                         f"{shape} ({numel} elements), got {len(data) // 2}")
        raw = bytearray(bytes.fromhex(data))
        flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        out[name] = flat.view(dtype).reshape(shape).clone()
    return out


def _set_attr(root: torch.nn.Module, target: str, value: Any, at: str, node: str) -> None:
    """Puts `value` (a tensor, None or a GraphModule) at the attribute path `target` under
    `root`, making plain modules for the path; an ExportError where the path runs into an
    attribute that is not one of those modules, or names one every nn.Module has (`forward`,
    `training`)."""
    owner = root
    *path, leaf = target.split(".")
    for i, part in enumerate(path):
        sub = owner._modules.get(part)
        if sub is None:
            if part in owner._buffers:
                raise _error(at, node, f"get_attr target {target!r}: "
                             f"{'.'.join(path[:i + 1])!r} is another get_attr's value")
            if hasattr(owner, part):
                raise _error(at, node, f"get_attr target {target!r}: "
                             f"{'.'.join(path[:i + 1])!r} is an attribute of the module, not a "
                             "path of the graph's own")
            sub = torch.nn.Module()
            owner.add_module(part, sub)
        elif type(sub) is not torch.nn.Module:
            raise _error(at, node, f"get_attr target {target!r}: {'.'.join(path[:i + 1])!r} "
                         "is another get_attr's value")
        owner = sub
    if hasattr(owner, leaf):
        raise _error(at, node, f"get_attr target {target!r}: {leaf!r} "
                     + ("is already a module of other get_attr targets" if leaf in owner._modules
                        else "is an attribute every torch.nn.Module has"))
    if isinstance(value, torch.nn.Module):
        owner.add_module(leaf, value)
    else:
        owner.register_buffer(leaf, value)


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


# ----------------------------------------------------------------------------- JSON text


def _dumps(value: Any, at: str = "", node: Any = None) -> str:
    # allow_nan=False: non-finite floats must already be {"float": ...}.
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
        if not text.isascii():
            text.encode("utf-8")  # a lone surrogate has no UTF-8 form
        return text
    except (ValueError, TypeError, RecursionError) as e:
        # What JSON cannot hold, named where it is (a NaN in meta, a set, a lone surrogate).
        try:
            _check_json(value, 1)
        except _Bad as bad:
            raise _error(bad.at(at), node, bad.message) from None
        raise _error(at, node, f"cannot be written as JSON: {e}") from None


def _block(items: Sequence[Any], at: str) -> str:
    if not items:
        return "[]"
    return "[\n" + ",\n".join(
        _dumps(item, f"{at}/{i}", item.get("name") if isinstance(item, Mapping) and
               at == "/nodes" else None) for i, item in enumerate(items)) + "\n]"


def dumps_graph(doc: Mapping[str, Any]) -> str:
    """Canonical JSON text, byte for byte what the C++ writer (ir/json/writer.cc) emits.

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
        f'"format":{_dumps(doc["format"], "/format")}',
        f'"version":{_dumps(doc["version"], "/version")}',
        f'"process_groups":{_block(doc.get("process_groups", []), "/process_groups")}',
        f'"inputs":{_block(doc.get("inputs", []), "/inputs")}',
    ]
    if doc.get("outputs"):
        parts.append(f'"outputs":{_block(doc["outputs"], "/outputs")}')
    if doc.get("constants"):
        parts.append(f'"constants":{_block(doc["constants"], "/constants")}')
    if doc.get("meta"):
        parts.append(f'"meta":{_dumps(doc["meta"], "/meta")}')
    parts.append(f'"nodes":{_block(doc["nodes"], "/nodes")}')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_graph(doc: Mapping[str, Any], path: str | Path) -> None:
    """Writes canonical JSON by the C++ writer's rules (docs/graph-format.md "Writing outputs"):
    a regular file or a new one through a temporary file beside it (mkstemp: a fresh name opened
    with O_EXCL), synced and renamed into place, so readers never see half a file and nothing
    planted at a guessable name is followed; a symbolic link's final target the same way (the
    link stays); a character device or a FIFO written in place; a directory, a socket or a block
    device refused. Errors are ExportErrors naming the path."""
    from jointfx._files import write_output

    write_output(path, dumps_graph(doc).encode("utf-8"), ExportError)


def load_graph(path: str | Path, *, max_input_bytes: int | None = None) -> dict[str, Any]:
    """A graph file's JSON document (import_graph makes a GraphModule of it), read as the CLI
    reads its inputs (docs/graph-format.md "Input limits"): at most `max_input_bytes` (the CLI's
    default limit, 2 GiB) without ever reading more than that, so /dev/zero or a runaway pipe ends
    with an error instead of filling memory; a directory refused; UTF-8; standard JSON only (no
    NaN or Infinity, no key repeated in an object). Errors are ExportErrors naming the file and,
    for the text, line, column and byte."""
    from jointfx._files import DEFAULT_INPUT_LIMIT, read_input

    shown = str(path)
    limit = DEFAULT_INPUT_LIMIT if max_input_bytes is None else max_input_bytes
    data = read_input(path, "graph", limit, ExportError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise ExportError(f"{shown}:{line}:{column}: error: invalid UTF-8 at byte {e.start}: "
                          f"{e.reason}") from None
    try:
        doc = json.loads(text, parse_constant=_refuse_json_constant, parse_int=_json_int,
                         object_pairs_hook=_json_object)
    except json.JSONDecodeError as e:
        raise _text_error(shown, text, e.pos, f"JSON syntax error: {e.msg}") from None
    except (_JsonRefused, RecursionError) as e:
        pos, message = _json_problem(text)
        raise _text_error(shown, text, pos, message or str(e)) from None
    if not isinstance(doc, dict):
        raise ExportError(f"{shown}: error: expected a JSON object at the top level, got "
                          f"{_describe(doc)}")
    return doc


class _JsonRefused(Exception):
    """Valid for Python's json module, refused by the format (its position is found after)."""


def _refuse_json_constant(word: str) -> Any:
    raise _JsonRefused(f"{word} is not JSON")


def _json_int(digits: str) -> int:
    try:
        return int(digits)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise _JsonRefused(f"an integer of {len(digits.lstrip('-'))} digits") from None


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _JsonRefused("a key repeated in an object")
    return out


def _text_error(shown: str, text: str, pos: int, message: str) -> ExportError:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    byte = len(text[:pos].encode("utf-8"))
    return ExportError(f"{shown}:{line}:{column}: error: {message} (at byte {byte})")


# An integer literal longer than Python converts (a float's digits are no integer).
_LONG_INT = (rf"|(?<![0-9.eE+-])-?[0-9]{{{sys.get_int_max_str_digits() + 1},}}(?![0-9.eE])"
             if sys.get_int_max_str_digits() else "")
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"\s*:?|[\[\]{}]|-?Infinity|NaN' + _LONG_INT)


def _json_problem(text: str) -> tuple[int, str]:
    """Where a text Python's json module read (or gave up on by recursion) breaks the format's
    rules, and which: NaN or Infinity, a key repeated in an object, nesting deeper than
    _MAX_DEPTH. Only run on a document already known to hold one of them."""
    stack: list[set[str] | None] = []  # per open container: its keys so far (None: an array)
    for m in _JSON_TOKEN.finditer(text):
        token = m.group()
        first = token[0]
        if first in "[{":
            if len(stack) >= _MAX_DEPTH:
                return m.start(), f"nesting deeper than {_MAX_DEPTH} levels"
            stack.append(set() if first == "{" else None)
        elif first in "]}":
            if stack:
                stack.pop()
        elif first == '"':
            if token.endswith(":") and stack and stack[-1] is not None:
                key = json.loads(token[:-1].rstrip())
                if key in stack[-1]:
                    return m.start(), f"key {_shown(key)} repeated in an object"
                stack[-1].add(key)
        elif first in "-0123456789" and token != "-Infinity":
            return m.start(), (f"an integer of {len(token.lstrip('-'))} digits, more than "
                               f"Python converts (sys.get_int_max_str_digits)")
        else:
            return m.start(), f"{token} is not JSON (the format writes a non-finite number " \
                              '{"float": "nan"}, {"float": "inf"} or {"float": "-inf"})'
    return 0, ""


def document_bytes(doc: Mapping[str, Any]) -> bytes:
    """`doc` as JSON text for the C++ reader, after checking it is plain JSON data: a
    non-finite float has no JSON form (orjson would write null, and the graph would come back
    with None where the number was), so it is an ExportError naming the place, as is anything
    else JSON cannot hold."""
    try:
        _check_json(doc, 1)
    except _Bad as e:
        node = None
        path = e.path[::-1]
        if len(path) >= 2 and path[0] == "nodes" and isinstance(doc.get("nodes"), list):
            nd = doc["nodes"][path[1]]
            node = nd.get("name") if isinstance(nd, Mapping) else None
        raise _error(e.at(""), node, e.message) from None
    return _json_bytes(doc)
