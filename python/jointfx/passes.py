"""Running C++ pass pipelines on torch.fx graphs in process.

`run_pipeline(gm, "dce,tag-fsdp{reshard=always},remat")` exports the GraphModule to the JSON
interchange format in memory, runs the C++ pass manager through the `_jointfx_C` extension (no
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
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx

from jointfx.export import (
    GM_META_KEY,
    Opaque,
    _import_meta,
    _json_bytes,
    arg_from_json,
    export_graph,
    export_text,
    import_graph,
    resolve_target,
)
from jointfx.report import finish_report


class PipelineError(ValueError):
    """A pipeline could not run: the message is the C++ pass manager's, with its location."""


def _extension() -> Any:
    try:
        import _jointfx_C
    except ImportError as e:  # built by scripts/build into build/python, or by `pip install .`
        raise ImportError("the extension _jointfx_C is not on sys.path: run scripts/build and add "
                          "build/python to PYTHONPATH, or `pip install .`") from e
    return _jointfx_C


def run_pipeline_doc(doc: Mapping[str, Any], pipeline: str, *, verify: bool = True,
                     timing: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """Runs `pipeline` on a JSON v1 document; returns (new document, report)."""
    ext = _extension()
    try:
        out, report = ext.run_pipeline_json(_json_bytes(doc), pipeline, verify, timing)
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
    if not in_place:
        doc = export_graph(gm, **header)
        new_doc, report = run_pipeline_doc(doc, pipeline, verify=verify, timing=timing)
        finish_report(report, doc, pipeline, strict=strict)
        new_gm = import_graph(new_doc)
        _copy_attrs(gm, new_gm)
        new_gm.meta["jointfx_report"] = report
        return new_gm
    # stacklevel: a warning names the code that called run_pipeline or the graph_pass.
    exported = export_text(gm, extension=ext, stacklevel=4, **header)
    try:
        script, erased, new_header, report = ext.run_pipeline_edits(exported.text, pipeline,
                                                                    verify, timing)
    except ext.JointfxError as e:
        raise PipelineError(str(e)) from None
    finish_report(report, exported.header, pipeline, strict=strict)
    report["edits"] = apply_edits(gm, exported.node_meta, script, erased, new_header)
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
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    placeholders = graph.find_nodes(op="placeholder")
    for n in [*placeholders, *graph.nodes]:
        val = n.meta.get("val")
        for v in (val if isinstance(val, (list, tuple)) else (val,)):
            if isinstance(v, FakeTensor):
                return v.fake_mode
    return FakeTensorMode(allow_non_fake_inputs=True)


class _Vals:
    """meta['val'] for new nodes, in the graph's own FakeTensorMode (found once, on demand)."""

    def __init__(self, graph: fx.Graph) -> None:
        self.graph = graph
        self.mode: Any = None

    def make(self, meta: Any) -> Any:
        if isinstance(meta, list):
            return tuple(self.make(m) for m in meta)
        if isinstance(meta, dict) and "shape" in meta:
            if self.mode is None:
                self.mode = _fake_mode(self.graph)
            from jointfx.export import _parse_dtype, fake_tensor

            return fake_tensor(self.mode, meta["shape"],
                               meta.get("stride") or _contiguous(meta["shape"]),
                               _parse_dtype(meta["dtype"]),
                               torch.device(meta.get("device") or "cpu"))
        if isinstance(meta, dict) and set(meta) == {"float"}:
            return float(meta["float"])
        return meta


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


def _get_attr(mod: torch.nn.Module, target: str) -> Any:
    obj: Any = mod
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
