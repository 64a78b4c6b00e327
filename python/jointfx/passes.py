"""Running C++ pass pipelines on torch.fx graphs in process.

`run_pipeline(gm, "dce,tag-fsdp{reshard=always},remat")` exports the GraphModule to the JSON
interchange format in memory, runs the C++ pass manager through the `jointfx._C` extension (no
files, no subprocess), and applies the result to `gm` itself as an edit script
(docs/pytorch-bridge.md, "In place"): nodes the pipeline left alone stay the same `fx.Node`
objects with their meta untouched, changed nodes get new args or meta keys, new nodes are created
with FakeTensor values in the graph's own FakeTensorMode and the source meta of the node they
derive from, and erased nodes are removed. `graph_pass(spec)` wraps that as a pass with
GraphTrainer's signature `(gm, example_inputs, **kwargs) -> gm`.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from jointfx.export import (
    GM_META_KEY,
    Opaque,
    _checkpoint_policies,
    _export_document,
    _get_attr,
    _import_meta,
    _parse_dtype,
    arg_from_json,
    document_bytes,
    export_native,
    fake_tensor,
    import_graph,
    resolve_target,
)
from jointfx.report import finish_report


class PipelineError(ValueError):
    """A pipeline could not run: the message is the C++ pass manager's, with its location."""


def _extension() -> Any:
    try:
        from jointfx import _C
    except ImportError as e:  # built by scripts/build into build/python/jointfx, or by pip
        raise ImportError("the extension jointfx._C is not found: run scripts/build and add "
                          "build/python to PYTHONPATH, or `pip install .`") from e
    return _C


def _pipeline_text(pipeline: Any, fn: str) -> str:
    """`pipeline` as the text the pass manager reads (a spec, a shipped name or a file path), or
    a TypeError naming what was given instead."""
    if isinstance(pipeline, os.PathLike):
        pipeline = os.fspath(pipeline)
    if not isinstance(pipeline, str):
        raise TypeError(f"{fn}: expected the pipeline as a str (a spec such as 'dce,bucket', a "
                        f"shipped name such as 'default', or a path), got "
                        f"{type(pipeline).__name__}")
    # Said here: the extension would truncate a path at a NUL byte (the C library's file names
    # end there) and turn a lone surrogate, which has no UTF-8 form, into pybind's "incompatible
    # function arguments" TypeError, as if the str were not one.
    if "\0" in pipeline:
        raise ValueError(f"{fn}: the pipeline {pipeline!r} holds a NUL byte at position "
                         f"{pipeline.index(chr(0))}: no spec, name or path has one")
    try:
        pipeline.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{fn}: the pipeline {pipeline!r} is not valid text: {e.reason} at "
                         f"position {e.start}") from None
    return pipeline


def run_pipeline_doc(doc: Mapping[str, Any], pipeline: str, *, verify: bool = True,
                     timing: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Runs `pipeline` on a JSON v1 document; returns (new document, report). A document that is
    not plain JSON data (a float('nan') where the format writes {"float": "nan"}) is an
    ExportError naming the place: it has no JSON form to send."""
    pipeline = _pipeline_text(pipeline, "run_pipeline_doc")
    ext = _extension()
    text = document_bytes(doc)
    try:
        out, report = ext.run_pipeline_json(text, pipeline, verify, timing)
    except ext.JointfxError as e:
        raise PipelineError(str(e)) from None
    return json.loads(out), report


def run_pipeline(gm: fx.GraphModule, pipeline: str, *, verify: bool = True,
                 process_groups: Sequence[Any] | None = None,
                 inputs: Sequence[Any] | None = None,
                 outputs: Sequence[Any] | None = None,
                 graph_meta: Mapping[str, Any] | None = None,
                 in_place: bool = True,
                 timing: bool = True,
                 strict: bool = False) -> fx.GraphModule:
    """Runs `pipeline` on `gm` and returns the transformed GraphModule.

    in_place=True (the default) edits `gm`'s own graph and returns `gm`: untouched nodes keep
    their identity and meta, attributes (tensor constants) and the FakeTensorMode stay.
    in_place=False leaves `gm` alone and returns a new GraphModule rebuilt from the document
    (import_graph: FX-only meta is lost, get_attr values are copied from `gm`).

    Header arguments (process groups, input kinds/FQNs, output specs) default to what
    import_graph or an earlier run stored in gm.meta["jointfx"], so graphs loaded from fixtures
    need none of them.

    The report (per-pass statistics and seconds, remarks, findings) is in
    `meta["jointfx_report"]` of the result, logged to the "jointfx" logger and traced for
    tlparse; findings warn (JointfxWarning), or raise StrictCheckError with `strict`
    (jointfx.report).
    """
    # The cyclic garbage collector walks every live object each time allocations pass its
    # threshold; a 10K-node graph with its FakeTensors makes those walks half of the time spent
    # here (llama3-8b: 0.6 -> 0.3 s applying the edits). Reference counting still frees what
    # this drops; only cycles wait for the next collection after the call.
    if not isinstance(gm, fx.GraphModule):
        raise TypeError(f"run_pipeline: expected a torch.fx.GraphModule, got "
                        f"{type(gm).__name__}")
    pipeline = _pipeline_text(pipeline, "run_pipeline")
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_pipeline(gm, pipeline, verify=verify, process_groups=process_groups,
                             inputs=inputs, outputs=outputs, graph_meta=graph_meta,
                             in_place=in_place, timing=timing, strict=strict)
    finally:
        if was_enabled:
            gc.enable()


def _run_pipeline(gm: fx.GraphModule, pipeline: str, *, verify: bool,
                  process_groups: Sequence[Any] | None, inputs: Sequence[Any] | None,
                  outputs: Sequence[Any] | None, graph_meta: Mapping[str, Any] | None,
                  in_place: bool, timing: bool, strict: bool) -> fx.GraphModule:
    header = {"process_groups": process_groups, "inputs": inputs, "outputs": outputs,
              "graph_meta": graph_meta}
    ext = _extension()
    # The report's finding about missing parameter specs replaces the exporter's warning.
    if not in_place:
        doc = _export_document(gm, stacklevel=4, warn_no_specs=False, **header)
        new_doc, report = run_pipeline_doc(doc, pipeline, verify=verify, timing=timing)
        finish_report(report, doc, pipeline, strict=strict)
        new_gm = import_graph(new_doc)
        _copy_attrs(gm, new_gm)
        new_gm.meta["jointfx_report"] = report
        return new_gm
    start = time.perf_counter()
    # stacklevel: a warning names the code that called run_pipeline or the graph_pass.
    exported = export_native(gm, extension=ext, stacklevel=4, warn_no_specs=False, **header)
    exported_at = time.perf_counter()
    try:
        script = ext.EditScript(exported.document, pipeline, verify, timing,
                                expensive_checks=_expensive_checks())
    except ext.JointfxError as e:
        raise PipelineError(str(e)) from None
    ran_at = time.perf_counter()
    report = script.report
    finish_report(report, exported.header, pipeline, strict=strict)
    report["edits"] = apply_script(gm, exported.node_meta, script, lint=not verify or _lint_edits())
    # Where an in-process call spends its time (wall seconds): exporting the FX graph, the C++
    # call (reading the document, the pipeline of total_seconds, building the edit script) and
    # applying the edits to the FX graph.
    report["boundary_seconds"] = {"export": exported_at - start, "cxx": ran_at - exported_at,
                                  "apply": time.perf_counter() - ran_at}
    gm.meta["jointfx_report"] = report
    return gm


def graph_pass(pipeline: str, **export_kwargs: Any) -> Callable[..., fx.GraphModule]:
    """A GraphTrainer-style pass `(gm, example_inputs, **kwargs) -> gm` running `pipeline`.

    Keyword arguments that run_pipeline does not take (GraphTrainer passes its own, e.g.
    `config`) are accepted and ignored.
    """
    import inspect

    accepted = set(inspect.signature(run_pipeline).parameters) - {"gm", "pipeline"}

    def jointfx_pass(gm: fx.GraphModule, example_inputs: Any = None, **kwargs: Any) -> fx.GraphModule:
        ours = {k: v for k, v in kwargs.items() if k in accepted}
        return run_pipeline(gm, pipeline, **{**export_kwargs, **ours})

    jointfx_pass.__name__ = f"jointfx[{pipeline}]"
    return jointfx_pass


class JointfxPass(PassBase):
    """`pipeline` as a torch.fx pass (torch.fx.passes.infra): `JointfxPass(pipeline, **kwargs)(gm)`
    runs `run_pipeline(gm, pipeline, **kwargs)` and returns `PassResult(gm, modified)`, modified
    when any pass of the pipeline reported a change, so it goes into torch.fx's `PassManager`
    like any PassBase. The report is in `result.graph_module.meta["jointfx_report"]`."""

    def __init__(self, pipeline: str, **kwargs: Any) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.kwargs = kwargs

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        gm = run_pipeline(graph_module, self.pipeline, **self.kwargs)
        passes = gm.meta["jointfx_report"].get("passes", [])
        return PassResult(gm, any(p.get("changed") for p in passes))

    def __repr__(self) -> str:
        return f"JointfxPass({self.pipeline!r})"


def pass_names() -> list[str]:
    """The registered C++ passes."""
    return list(_extension().pass_names())


# ----------------------------------------------------------------------------- applying edits

# Meta of the node a new node derives from that describes where it came from in the user's
# program; copied (dicts shallow-copied) onto the new node before its own JSON meta.
_SOURCE_META = ("stack_trace", "custom", "seq_nr", "nn_module_stack", "source_fn_stack",
                "fwd_nn_module_stack", "fwd_source_fn_stack", "from_node")


def _fake_mode(graph: fx.Graph) -> Any:
    """The FakeTensorMode of the graph's values (placeholders first, they are few), else new."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    placeholders = graph.find_nodes(op="placeholder")
    for n in [*placeholders, *graph.nodes]:
        val = n.meta.get("val")
        for v in (val if isinstance(val, (list, tuple)) else (val,)):
            if isinstance(v, FakeTensor):
                return v.fake_mode
    return FakeTensorMode(allow_non_fake_inputs=True)


class _Vals:
    """meta['val'] for new nodes, in the graph's own FakeTensorMode (found once, on demand).

    Takes the JSON value meta ({"shape", "stride", "dtype", "device"}, lists, {"float": ...}) and
    EditScript's form of it (a tensor as the tuple (shape, stride, dtype, device), plus the slot of
    the node whose FakeTensor a clone may share)."""

    def __init__(self, graph: fx.Graph, slots: Sequence[fx.Node] = ()) -> None:
        self.graph = graph
        self.slots = slots
        self.mode: Any = None
        self.dtypes: dict[str, torch.dtype] = {}
        self.devices: dict[str, torch.device] = {}

    def make(self, meta: Any) -> Any:
        kind = type(meta)
        if kind is tuple:
            if self.mode is None:
                self.mode = _fake_mode(self.graph)
            if len(meta) == 5:
                shared = self.slots[meta[4]].meta.get("val")
                # The source's own FakeTensor, as torch's Graph.node_copy shares it: the clone
                # recomputes the same value. Only one of this graph's mode is taken.
                if isinstance(shared, FakeTensor) and shared.fake_mode is self.mode:
                    return shared
            shape, stride, dtype, device = meta[:4]
            return self._fake(shape, stride or _contiguous(shape), dtype, device or "cpu")
        if kind is list:
            return tuple(self.make(m) for m in meta)
        if kind is dict and "shape" in meta:
            if self.mode is None:
                self.mode = _fake_mode(self.graph)
            return self._fake(meta["shape"], meta.get("stride") or _contiguous(meta["shape"]),
                              meta["dtype"], meta.get("device") or "cpu")
        if kind is dict and set(meta) == {"float"}:
            return float(meta["float"])
        return meta

    def _fake(self, shape: Sequence[int], stride: Sequence[int], dtype: str, device: str) -> Any:
        dt = self.dtypes.get(dtype)
        if dt is None:
            dt = self.dtypes[dtype] = _parse_dtype(dtype)
        dev = self.devices.get(device)
        if dev is None:
            dev = self.devices[device] = torch.device(device)
        return _new_fake_tensor(self.mode, shape, stride, dt, dev)


def _new_fake_tensor(mode: Any, shape: Sequence[int], stride: Sequence[int], dtype: torch.dtype,
                     device: torch.device) -> Any:
    """A fresh FakeTensor of `mode` (as jointfx.export.fake_tensor makes one): a meta tensor
    wrapped the way FakeTensorMode wraps its meta kernels' outputs, minus the converter's memo
    (keyed by the meta tensor, which nothing else ever holds), about a third of its cost."""
    if torch._C._len_torch_dispatch_stack() == 0:  # else the mode's own path (see fake_tensor)
        plain = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        return FakeTensor(mode, plain, device)
    return fake_tensor(mode, shape, stride, dtype, device)


def _contiguous(shape: Sequence[int]) -> list[int]:
    stride, acc = [], 1
    for s in reversed(shape):
        stride.append(acc)
        acc *= max(int(s), 1)
    return stride[::-1]


def _merge_arg(new: Any, old: Any, env: Mapping[str, fx.Node], name: str) -> Any:
    """arg_from_json, except that an opaque value where the old argument had the same opaque
    value keeps the old Python object (a slice stays a slice, not an Opaque stand-in)."""
    if isinstance(new, dict) and len(new) == 1:
        (key, inner), = new.items()
        if key == "opaque":
            if not isinstance(old, (fx.Node, Opaque)) and repr(old) == inner["repr"]:
                return old
            return Opaque(type=inner["type"], repr=inner["repr"])
        if key == "tuple":
            olds = old if isinstance(old, tuple) and len(old) == len(inner) else [None] * len(inner)
            return tuple(_merge_arg(v, o, env, name) for v, o in zip(inner, olds))
        return arg_from_json(new, env, name)
    if isinstance(new, list):
        olds = old if isinstance(old, (list, tuple)) and len(old) == len(new) else [None] * len(new)
        return [_merge_arg(v, o, env, name) for v, o in zip(new, olds)]
    return arg_from_json(new, env, name)


def _node_args(nd: Mapping[str, Any], old: fx.Node | None, env: Mapping[str, fx.Node]
               ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    name = nd["name"]
    old_args = old.args if old is not None else ()
    old_kwargs = old.kwargs if old is not None else {}
    args_json = nd.get("args", [])
    args = tuple(_merge_arg(a, old_args[i] if i < len(old_args) else None, env, name)
                 for i, a in enumerate(args_json))
    kwargs = {k: _merge_arg(v, old_kwargs.get(k), env, name)
              for k, v in nd.get("kwargs", {}).items()}
    if nd["op"] == "output":
        values = args[0] if args else []
        # FX keeps whatever container the tracer returned; keep the caller's.
        if old is not None and old.args and isinstance(old.args[0], tuple):
            values = tuple(values)
        args = (values,)
    return args, kwargs


def apply_edits(gm: fx.GraphModule, exported_meta: Callable[[fx.Node], Mapping[str, Any]],
                script: Sequence[Any], erased: Sequence[str],
                header: Mapping[str, Any]) -> dict[str, int]:
    """Applies run_pipeline_edits' script to `gm` in place; returns counts of what changed.
    `exported_meta(node)` is the node's meta as the exporter wrote it (ExportedText.node_meta)."""
    graph = gm.graph
    by_name = {n.name: n for n in graph.nodes}
    env: dict[str, fx.Node] = dict(by_name)  # C++ name -> fx.Node (FX may rename new nodes)
    vals = _Vals(graph)
    counts = {"kept": 0, "changed": 0, "new": 0, "erased": len(erased), "moved": 0}
    # Erased nodes stay in place until the end (their users are rewired first); a node right
    # after them has not moved.
    dead = {by_name[name] for name in erased}
    cursor = graph._root
    for entry in script:
        if type(entry) is str:
            node = by_name[entry]
            counts["kept"] += 1
        elif entry[0] == "keep":
            _, name, text, args_changed, meta_changed = entry
            node = by_name[name]
            nd = json.loads(text)
            if args_changed:
                node.args, node.kwargs = _node_args(nd, node, env)
            if meta_changed:
                _update_meta(node, exported_meta(node), nd.get("meta", {}), vals)
            env[nd["name"]] = node
            counts["changed"] += 1
        else:
            _, name, text, origin = entry
            nd = json.loads(text)
            args, kwargs = _node_args(nd, None, env)
            op = nd["op"]
            target = resolve_target(nd["target"], name) if op == "call_function" else nd["target"]
            node = graph.create_node(op, target, args, kwargs, name=name)
            src = env.get(origin) if origin is not None else None
            if src is not None:
                for key in _SOURCE_META:
                    if key in src.meta:
                        v = src.meta[key]
                        node.meta[key] = dict(v) if isinstance(v, dict) else v
            node.meta.update(_import_meta(nd.get("meta", {}), vals))
            env[nd["name"]] = node
            counts["new"] += 1
        prev = node.prev
        while prev in dead:
            prev = prev.prev
        if prev is not cursor:
            cursor.append(node)
            counts["moved"] += 1
        cursor = node
    for name in reversed(erased):
        graph.erase_node(by_name[name])
    stored = {
        "process_groups": list(header["process_groups"]),
        "inputs": list(header["inputs"]),
        "outputs": list(header["outputs"]),
        "meta": json.loads(header["meta"]) if header["meta"] else {},
    }
    gm.meta[GM_META_KEY] = stored
    graph.lint()
    _recompile_lazily(gm)
    return counts


# Checks on the passes and the IR rather than on the user's graph: the pass manager's structural
# hash of the whole graph before each pass and after one that reports "unchanged" (it catches a
# pass that changed the graph and said it did not), and the verifier's whole-graph pass over the
# Graph's own bookkeeping (name index, use lists; VerifyOptions::ir_invariants). Like MLIR's
# expensive checks they are off in the in-process path, which runs inside training steps, and on
# with JOINTFX_EXPENSIVE_CHECKS=1 (the test suite sets it). The CLI keeps them on.
def _expensive_checks() -> bool:
    return os.environ.get("JOINTFX_EXPENSIVE_CHECKS", "") not in ("", "0")


# graph.lint() after applying an edit script, also when the C++ verifier checked the pipeline's
# output (run_pipeline(verify=True), where it is skipped by default: see apply_script).
def _lint_edits() -> bool:
    return os.environ.get("JOINTFX_LINT_EDITS", "") not in ("", "0")


def _decode_arg(kind: str, text: str) -> Any:
    """An EditScript argument of a torch type (cached per script by the extension): `kind` is
    dtype, device, layout or memory_format, decoded as the JSON form {kind: text} is."""
    return arg_from_json({kind: text}, {}, "?")


def _keep_opaque(new: Any, old: Any) -> Any:
    """`new` with every Opaque stand-in whose repr is the old argument's in the same place
    replaced by that old object (a slice stays a slice), as _merge_arg does for JSON."""
    if isinstance(new, Opaque):
        if not isinstance(old, (fx.Node, Opaque)) and repr(old) == new.repr:
            return old
        return new
    if type(new) is tuple:
        olds = old if isinstance(old, tuple) and len(old) == len(new) else (None,) * len(new)
        return tuple(_keep_opaque(v, o) for v, o in zip(new, olds))
    if type(new) is list:
        olds = old if isinstance(old, (list, tuple)) and len(old) == len(new) else (None,) * len(new)
        return [_keep_opaque(v, o) for v, o in zip(new, olds)]
    return new


def _set_node_args(node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """What `node.args = args; node.kwargs = kwargs` does (both setters call
    _update_args_kwargs, which keeps the use lists), in one call and without Node.__setattr__
    taking the node out of the graph's find_nodes table and putting it back twice: that table is
    keyed by op and target, which this leaves alone."""
    node._update_args_kwargs(args, kwargs)


if not hasattr(torch._C._NodeBase, "_update_args_kwargs"):  # an older torch: the setters
    def _set_node_args(node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:  # noqa: F811
        node.args = args
        node.kwargs = kwargs


def apply_script(gm: fx.GraphModule, exported_meta: Callable[[fx.Node], Mapping[str, Any]],
                 script: Any, *, lint: bool = True) -> dict[str, int]:
    """Applies an EditScript (the extension's, made from `gm`'s export) to `gm` in place; returns
    the counts of kept, changed, new, erased and moved nodes. `exported_meta(node)` is the node's
    meta as the exporter wrote it (ExportedText.node_meta), asked for only where meta other than
    the typed keys changed.

    The result is the graph apply_edits makes from the JSON edit script of the same run: the
    extension hands over Python objects (arguments holding the fx.Nodes themselves, typed meta,
    which nodes move), so nothing is parsed here, untouched nodes left in place are not visited,
    and a clone whose value meta is its source's shares the source's FakeTensor.

    `lint` runs graph.lint() at the end. Without it the graph is still well-formed by
    construction: the node order is the C++ graph's, which its verifier checked (topological,
    names unique) when the pipeline ran with verify; every argument is an fx.Node of this graph
    or a plain value; call_function targets are resolved callables; new nodes go through
    graph.create_node (names, lookup table); and new get_attr nodes are checked here.
    """
    graph = gm.graph
    slots = list(graph.nodes)
    if len(slots) != script.n_input:
        raise PipelineError(f"edit script for {script.n_input} nodes, graph has {len(slots)}")
    script.bind(slots, _decode_arg, Opaque)
    vals = _Vals(graph, slots)
    targets: dict[str, Any] = {}
    # Made with no arguments, then given them: FX's create_node walks the arguments for raw
    # SymInts first, which the extension never puts there (it is half the cost of making a
    # node). Create-node hooks (torch.export's metadata hook) must see the arguments, so with
    # hooks the arguments go to create_node.
    hooks = bool(getattr(gm, "_create_node_hooks", None))
    set_args = _set_node_args
    new_get_attrs = []
    policies = _checkpoint_policies()
    cursor = graph._root
    with graph.inserting_after(None):  # new nodes at the end, until moved after the cursor
        for op in script.ops:
            kind = op[0]
            if kind == 0:  # a run of untouched nodes in place ends here
                cursor = slots[op[1]]
                continue
            if kind == 1:  # an untouched node that moves
                node = slots[op[1]]
                cursor.append(node)
                cursor = node
                continue
            if kind == 4:  # a new recompute tag alone
                _, slot, moved, recompute = op
                node = slots[slot]
                node.meta["recompute"] = policies[recompute]
            elif kind == 2:
                _, slot, moved, args_k, meta_set, meta_drop, node_json = op
                node = slots[slot]
                if args_k >= 0:
                    args, kwargs, opaque = script.args(args_k)
                    if opaque:
                        old_args = node.args
                        args = tuple(_keep_opaque(a, old_args[i] if i < len(old_args) else None)
                                     for i, a in enumerate(args))
                        kwargs = {k: _keep_opaque(v, node.kwargs.get(k)) for k, v in kwargs.items()}
                    if node.op == "output":
                        values = args[0] if args else []
                        # FX keeps whatever container the tracer returned; keep the caller's.
                        if node.args and isinstance(node.args[0], tuple):
                            values = tuple(values)
                        args = (values,)
                    _set_node_args(node, args, kwargs)
                if meta_set is not None:
                    node.meta.update(_import_meta(meta_set, vals))
                if meta_drop is not None:
                    for key in meta_drop:
                        node.meta.pop(key, None)
                        if key == "phase":
                            node.meta.pop("autograd_backward", None)
                if node_json is not None:
                    _update_meta(node, exported_meta(node), json.loads(node_json).get("meta", {}),
                                 vals)
            else:
                _, name, node_op, target, origin, moved, args_k, meta, node_json = op
                if node_op == "call_function":
                    fn = targets.get(target)
                    if fn is None:
                        fn = targets[target] = resolve_target(target, name)
                else:
                    fn = target
                args, kwargs, _ = script.args(args_k)
                if node_op == "output":
                    args = (args[0] if args else [],)
                if hooks:
                    node = graph.create_node(node_op, fn, args, kwargs, name=name)
                else:
                    node = graph.create_node(node_op, fn, name=name)
                    set_args(node, args, kwargs)
                if node_op in ("get_attr", "call_module"):
                    new_get_attrs.append(node)
                slots.append(node)
                if origin >= 0:
                    src_meta = slots[origin].meta
                    node_meta = node.meta
                    for key in _SOURCE_META:
                        if key in src_meta:
                            v = src_meta[key]
                            node_meta[key] = dict(v) if isinstance(v, dict) else v
                if node_json is not None:
                    meta = json.loads(node_json).get("meta", {})
                node.meta.update(_import_meta(meta, vals))
            if moved:
                cursor.append(node)
            cursor = node
    for slot in reversed(script.erased):
        graph.erase_node(slots[slot])
    header = script.header
    gm.meta[GM_META_KEY] = {
        "process_groups": list(header["process_groups"]),
        "inputs": list(header["inputs"]),
        "outputs": list(header["outputs"]),
        "meta": json.loads(header["meta"]) if header["meta"] else {},
    }
    if lint:
        graph.lint()
    else:
        for node in new_get_attrs:  # what lint checks of targets, for the nodes that are new
            _get_attr(gm, str(node.target))
    _recompile_lazily(gm)
    return dict(script.counts)


def _recompile_lazily(gm: fx.GraphModule) -> None:
    """Marks `gm`'s Python code stale instead of regenerating it now.

    Regenerating the code of a 10K-node graph (GraphModule.recompile) cost more than the C++
    pipeline and the edits together, and a graph handed on to aot_autograd or Inductor is read
    as a graph, its code never run. torch.fx's _LazyGraphModule (what Inductor's own passes use)
    regenerates on the first call, `.code` or pickling. A plain GraphModule (its class is the
    per-instance subclass GraphModule.__new__ made) becomes one in place, so the caller's object
    stays the one edited; any other GraphModule subclass is recompiled now."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    cls = type(gm)
    if not isinstance(gm, _LazyGraphModule) and cls.__bases__ == (fx.GraphModule,):
        # Named as GraphModule.__new__ names its per-instance classes (qualname ending in
        # GraphModuleImpl), so a deepcopy's __new__ subclasses _LazyGraphModule, not this class.
        lazy = type("GraphModuleImpl", (_LazyGraphModule,), {"__module__": cls.__module__})
        lazy.__qualname__ = cls.__qualname__
        lazy.__name__ = cls.__name__
        gm.__class__ = lazy
    gm.recompile()  # lazy for a _LazyGraphModule: the next forward or .code regenerates


def _update_meta(node: fx.Node, before: Mapping[str, Any], after: Mapping[str, Any],
                 vals: _Vals) -> None:
    """Sets the meta keys whose JSON changed; removes those the pipeline dropped. Keys the
    format does not carry (nn_module_stack, tensor_meta, ...) are left alone."""
    changed = {k: v for k, v in after.items() if before.get(k) != v}
    if "custom" in changed and isinstance(node.meta.get("custom"), dict):
        custom = dict(node.meta["custom"])
        custom.update(changed["custom"])
        for k in set(before.get("custom", {})) - set(changed["custom"]):
            custom.pop(k, None)
        changed["custom"] = custom
    node.meta.update(_import_meta(changed, vals))
    for key in set(before) - set(after):
        node.meta.pop(key, None)
        if key == "phase":
            node.meta.pop("autograd_backward", None)


def _copy_attrs(src: fx.GraphModule, dst: fx.GraphModule) -> None:
    """get_attr values of `src` onto the rebuilt `dst` (the document carries no values)."""
    for node in dst.graph.nodes:
        if node.op != "get_attr":
            continue
        try:
            value = _get_attr(src, str(node.target))
        except AttributeError:
            continue
        owner = dst
        *path, leaf = str(node.target).split(".")
        for part in path:
            owner = getattr(owner, part)
        if isinstance(value, torch.nn.Parameter):
            owner.register_parameter(leaf, value)
        elif isinstance(value, torch.Tensor):
            owner.register_buffer(leaf, value)
        else:
            setattr(owner, leaf, value)
