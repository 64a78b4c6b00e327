"""jointfx inside torchtitan's GraphTrainer (torchtitan 0.3.0, experiments/graph_trainer).

Importing this module registers GraphTrainer pass pipelines (`--compile.pass_pipeline NAME`):

    jointfx        GraphTrainer's own pass list with its FSDP passes replaced by jointfx's default
                   pipeline (configs/pipelines/default.json)
    jointfx_auto   the same with the planner (configs/pipelines/auto.json) under a memory limit:
                   --jointfx.memory_limit, else this rank's device memory (docs/torchtitan.md)
    graph_trainer  GraphTrainer's own default list, unchanged, plus the collective summary the
                   other two log: the baseline to compare with

and, for each, a post-init hook that takes the model from the Trainer. `python -m
jointfx.torchtitan <torchtitan train arguments>` is torchtitan's `train.main` with these
registered and a `jointfx` config section (`--jointfx.pipeline`, `--jointfx.memory_limit`, ...);
on a machine without a GPU it trains on CPU with gloo (for trying and testing).

Composition (docs/torchtitan.md): GraphTrainer's list is built as usual
(`construct_default_graph_passes`), then GraphTrainer's FSDP passes are taken out
(`deduplicate_fsdp_unshard_chains_pass`, `joint_transformer_block_bucketing_reordering_pass`,
`reassign_collective_pgs_pass`, `schedule_fsdp_comms_to_dense_regions_pass`) and so is its
`selective_activation_remat_pass`: the jointfx pass runs right after GraphTrainer's memory
policy has tagged the graph (SAC: `meta["recompute"]`) and its `remat` realizes those tags
together with its own reshard-after-forward tags, cloning each recomputed node once, so a
parameter that both SAC and FSDP resharding need in backward is gathered there once.
Everything else GraphTrainer chose stays where it was: canonicalization, the memory policy,
CPU offload, regional or full Inductor, cudagraphs. Under `memory_policy=sac_and_offload`
GraphTrainer's own remat stays (it knows the offload reload chains) and jointfx runs after it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

__all__ = [
    "PIPELINES",
    "JointfxConfig",
    "collective_summary",
    "compose",
    "main",
    "pipeline_spec",
    "register",
]

# GraphTrainer passes that jointfx's pipelines replace, by the name GraphTrainer logs.
REPLACED_PASSES = frozenset({
    "deduplicate_fsdp_unshard_chains_pass",
    "joint_transformer_block_bucketing_reordering_pass",
    "reassign_collective_pgs_pass",
    "schedule_fsdp_comms_to_dense_regions_pass",
})
# Realized by the jointfx pass's remat (unless CPU offload needs GraphTrainer's own).
SAC_REMAT_PASS = "selective_activation_remat_pass"
# The jointfx pass goes right after the last of these that the list has.
_ANCHORS = ("eliminate_dead_code_pass", "canonicalize_graph_pass", "tag_with_memory_policy_pass",
            "apply_cpu_offload_pass")
# Terminal passes: the collective summary is taken before them (after them the FX graph may
# no longer be authoritative: full Inductor replaces it).
_TERMINAL = frozenset({"annotate_flex_attention_for_regional_inductor_pass",
                       "annotate_rmsnorm_for_regional_inductor_pass", "regional_inductor_pass",
                       "insert_kernel_annotations_pass", "full_inductor_compilation_pass",
                       "cudagraph_pass"})

# name -> the jointfx pipeline file (configs/pipelines/<file>.json); None: GraphTrainer's own.
PIPELINES: dict[str, str | None] = {"jointfx": "default", "jointfx_auto": "auto",
                                    "graph_trainer": None}


@dataclass(kw_only=True, slots=True)
class JointfxConfig:
    """The `jointfx` section of the trainer config (`--jointfx.<field>`), added by
    `python -m jointfx.torchtitan`."""

    pipeline: str = ""
    """The jointfx pass list or pipeline file to run in place of the one the registered name
    implies (`jointfx`: configs/pipelines/default.json, `jointfx_auto`:
    configs/pipelines/auto.json), e.g. 'dce,tag-fsdp{reshard=always},remat,dedup-fsdp-unshard'."""

    memory_limit: str = ""
    """jointfx_auto: the peak each rank may reach (e.g. 40GiB). Default: 90% of this rank's GPU
    memory, or on CPU 90% of physical memory divided among the local ranks."""

    hardware: str = ""
    """jointfx_auto: the hardware profile its planner simulates (configs/hardware/*.json).
    Default: the pipeline file's own (h100.json)."""

    strict: bool = False
    """Turn the pass report's findings (e.g. no FSDP chain found) into errors."""

    record_dir: str = ""
    """Write rank<R>.json here after every step: per-step losses (exact, as float.hex), step
    seconds, peak RSS, and the final graph's collectives by phase. For comparing runs. Also
    rank<R>.graph.json, the graph the jointfx pass received, with the tracer's specs: what
    `jointfx opt` / `analyze` / `parity` reproduce the run's plan from."""


# ----------------------------------------------------------------------------- registration

class _State:
    """What the post-init hook learned about the Trainer of this process."""

    trainer: Any = None


def _model() -> torch.nn.Module | None:
    trainer = _State.trainer
    parts = getattr(trainer, "model_parts", None)
    return parts[0] if parts and len(parts) == 1 else None


def _options(config: Any) -> JointfxConfig:
    section = getattr(config, "jointfx", None)
    return section if isinstance(section, JointfxConfig) else JointfxConfig()


@functools.cache
def register() -> None:
    """Registers the pipelines of PIPELINES and their post-init hooks with GraphTrainer's
    registries (idempotent; importing this module does it)."""
    from torchtitan.experiments.graph_trainer.registry import (
        register_pass_pipeline,
        register_post_init_hook,
    )

    for name, file in PIPELINES.items():
        register_pass_pipeline(name)(functools.partial(_build_passes, name, file))
        register_post_init_hook(name)(_post_init)


def _post_init(trainer: Any) -> None:
    _State.trainer = trainer
    opts = _options(trainer.config)
    if opts.record_dir:
        from jointfx.torchtitan.record import Recorder

        Recorder(trainer, Path(opts.record_dir)).install()


# ----------------------------------------------------------------------------- the pass list

def pipeline_file(name: str) -> Path:
    """The shipped pipeline `name` (configs/pipelines/NAME.json): the installed package's copy
    (jointfx/configs/, as pip installs it), else the checkout's own, the order `jointfx opt -p
    NAME` searches (docs/passes.md, "Pipelines and profiles by name")."""
    package = Path(__file__).resolve().parents[1]
    for configs in (package / "configs", package.parents[1] / "configs"):
        path = configs / "pipelines" / f"{name}.json"
        if path.is_file():
            return path
    raise FileNotFoundError(f"jointfx pipeline {name!r} not found in {package / 'configs'} "
                            "(installed package) nor in the checkout's configs/")


def default_memory_limit() -> int:
    """90% of this rank's GPU memory; on CPU 90% of physical memory over the local ranks."""
    if torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
                   * 0.9)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return int(total * 0.9 / local)


def reshard_flag(config: Any) -> str:
    """torchtitan's `--parallelism.fsdp_reshard_after_forward` as tag-fsdp's `reshard` option,
    as torchtitan's FSDP2 reads it (torchtitan.distributed.fsdp): `always` (every block and the
    embeddings; the final norm and output projection, which backward reads first, stay gathered
    as under GraphTrainer's own memory policy: tag-fsdp's keep-tail) and `never` as they are;
    `default` is `never` under pipeline parallelism (no per-microbatch re-gathers) and else
    jointfx's default (every block re-gathered in backward but the last, which backward reads
    first)."""
    parallelism = getattr(config, "parallelism", None)
    flag = getattr(parallelism, "fsdp_reshard_after_forward", "default")
    if flag not in ("always", "never", "default"):
        raise ValueError(f"--parallelism.fsdp_reshard_after_forward {flag!r}: "
                         "expected always, never or default")
    if flag == "default" and getattr(parallelism, "pipeline_parallel_degree", 1) > 1:
        return "never"
    return flag


def pipeline_document(file_stem: str, opts: JointfxConfig,
                      reshard: str = "default") -> tuple[dict[str, Any], bool, Path]:
    """The pipeline file `file_stem` (its document, whether the run's options changed it, its
    path) with `memory-limit` (jointfx_auto: always, the device's when no limit is given;
    jointfx: only when given, on bucket and schedule), `hardware` (a profile by name as the CLI
    finds it, else a path from the working directory) and tag-fsdp's `reshard` (`reshard_flag`:
    `always` or `never` replace the file's choice, jointfx_auto's budget planner included) set,
    and the file's own relative paths resolved from its folder."""
    path = pipeline_file(file_stem)
    doc = json.loads(path.read_text())
    changed = False
    if reshard != "default":
        for p in doc["passes"]:
            if p["name"] == "tag-fsdp":
                options = p.setdefault("options", {})
                options["reshard"] = reshard
                options.pop("memory-limit", None)  # read by reshard=budget only
                options.pop("keep-last", None)  # read by reshard=default only
                if reshard == "always":
                    # GraphTrainer's memory policy leaves the loss epilogue (final norm and
                    # output projection, which backward reads first) saved: re-gathering them
                    # would be communication GraphTrainer does not do.
                    options["keep-tail"] = True
                changed = True
    # The planner (auto.json) always gets a byte limit, the device's when none is given; the
    # default pipeline keeps its own bound (the reference plan's peak) unless one is given.
    planner = any(p.get("options", {}).get("plan") == "auto" for p in doc["passes"])
    for p in doc["passes"]:
        options = p.get("options", {})
        if opts.memory_limit and p["name"] in ("bucket", "schedule") or \
                planner and "memory-limit" in options:
            options["memory-limit"] = opts.memory_limit or str(default_memory_limit())
            changed = True
            if p["name"] == "schedule" and options.get("prefetch") != "auto":
                options.pop("hardware", None)  # read only with prefetch=auto or the reference
        if "hardware" in options and (opts.hardware or changed):
            options["hardware"] = (hardware_option(opts.hardware) if opts.hardware
                                   else str((path.parent / options["hardware"]).resolve()))
            changed = True
        if options:
            p["options"] = options
    return doc, changed, path


def hardware_option(value: str) -> str:
    """`--jointfx.hardware` as a pass's `hardware=` value: a bare name (a100, h100: letters,
    digits, '-' and '_') stays a name, which the passes look up among the shipped profiles as
    `jointfx opt --hardware` does; anything else is a file, made absolute from the working
    directory."""
    if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", value):
        return value
    return str(Path(value).resolve())


def pipeline_spec(file_stem: str, opts: JointfxConfig, reshard: str = "default") -> str:
    """The pipeline the jointfx pass runs: `opts.pipeline` when set; else the pipeline file
    `file_stem` itself when no option changes it (`pipeline_document`), or the changed document
    as a pass list in memory (`dce,tag-fsdp{reshard=always, keep-tail=true},...`), the same text
    on every rank. Only when an option's value cannot be written in a pass list (a path with a
    brace or an '=') is it written to a file, created by mkstemp in a private temporary
    directory: never at a predictable path."""
    if opts.pipeline:
        return opts.pipeline
    doc, changed, path = pipeline_document(file_stem, opts, reshard)
    if not changed:
        return str(path)
    text = _pass_list(doc)
    if text is not None:
        return text
    folder = tempfile.mkdtemp(prefix="jointfx-pipeline-")
    fd, out = tempfile.mkstemp(dir=folder, prefix=f"{file_stem}-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    return out


def _pass_list(doc: Mapping[str, Any]) -> str | None:
    """The pipeline document as a pass list, or None when a value would not read back as
    itself (the pass-list syntax has no quoting: docs/passes.md)."""
    parts = []
    for p in doc["passes"]:
        items = []
        for key, value in sorted(p.get("options", {}).items()):
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            # A comma continues a list value (kinds=ag,rs,ar) unless a piece holds '='; each
            # piece is trimmed.
            if any(c in text for c in "{}=") or not all(
                    piece and piece == piece.strip() for piece in text.split(",")):
                return None
            items.append(f"{key}={text}")
        parts.append(p["name"] + ("{" + ", ".join(items) + "}" if items else ""))
    return ",".join(parts)


def check_options(config: Any) -> None:
    """Every jointfx option of the trainer config (the `jointfx` section and the reshard flag)
    checked before training starts, not at the first step: the pipeline the registered
    `--compile.pass_pipeline` would run is built and configured on a one-node graph, and
    `--jointfx.record_dir` is made and written to. A bad value raises ValueError naming the
    option."""
    name = getattr(getattr(config, "compile", None), "pass_pipeline", "")
    opts = _options(config)
    if name not in PIPELINES and opts.record_dir:
        # The recorder is a post-init hook of the pipelines registered here only.
        raise ValueError(f"--jointfx.record_dir: records the pipelines jointfx registers "
                         f"({', '.join(PIPELINES)}), not --compile.pass_pipeline {name!r}; "
                         "graph_trainer is GraphTrainer's own default list, recorded")
    if name not in PIPELINES or PIPELINES[name] is None:
        used = [f"--jointfx.{f}" for f in ("pipeline", "memory_limit", "hardware")
                if getattr(opts, f)]
        if used:
            raise ValueError(f"{', '.join(used)}: read by the jointfx pipelines "
                             f"({', '.join(k for k, v in PIPELINES.items() if v)}), not by "
                             f"--compile.pass_pipeline {name!r}")
    else:
        reshard = reshard_flag(config)
        spec = pipeline_spec(PIPELINES[name], opts, reshard)
        try:
            _configure(spec)
        except Exception as e:  # the library's PipelineError / JfxError: said with the option
            given = [f"--jointfx.{f} {getattr(opts, f)!r}"
                     for f in ("pipeline", "memory_limit", "hardware") if getattr(opts, f)]
            raise ValueError(f"{'; '.join(given) or '--compile.pass_pipeline ' + name}: "
                             f"{str(e).strip()}") from None
    if opts.record_dir:
        folder = Path(opts.record_dir)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".jointfx-check-"):
                pass
        except OSError as e:
            raise ValueError(f"--jointfx.record_dir {opts.record_dir!r}: cannot write there: "
                             f"{e.strerror or e}") from None


@functools.cache
def _configure(spec: str) -> None:
    """Runs `spec` on a one-node graph: every pass built and its options parsed, its hardware
    profile loaded."""
    import jointfx

    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(1)
    y = g.call_function(torch.ops.aten.sum.default, (x,))
    y.meta["val"] = torch.empty(())
    g.output([y])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jointfx.run_pipeline_doc(jointfx.export_graph(fx.GraphModule(torch.nn.Module(), g)),
                                 spec)


def _pass_name(p: Callable[..., Any]) -> str:
    return p.func.__name__ if isinstance(p, functools.partial) else getattr(p, "__name__", "")


def compose(gt_passes: list[Callable[..., Any]], jointfx: Callable[..., Any] | None, *,
            keep_sac_remat: bool = False,
            summary: Callable[..., Any] | None = None) -> list[Callable[..., Any]]:
    """GraphTrainer's pass list with its FSDP passes (REPLACED_PASSES) and, unless
    `keep_sac_remat`, its SAC remat taken out, `jointfx` inserted after the last of the
    cleanup / memory-policy / offload passes (after the SAC remat when it is kept), and
    `summary` (a read-only pass) before the terminal Inductor / cudagraph passes.
    `jointfx=None` leaves GraphTrainer's list as it is (only `summary` is added)."""
    out = []
    for p in gt_passes:
        name = _pass_name(p)
        if jointfx is not None and (name in REPLACED_PASSES
                                    or (name == SAC_REMAT_PASS and not keep_sac_remat)):
            continue
        out.append(p)
    if jointfx is not None:
        anchors = _ANCHORS + ((SAC_REMAT_PASS,) if keep_sac_remat else ())
        at = max((i + 1 for i, p in enumerate(out) if _pass_name(p) in anchors), default=0)
        out.insert(at, jointfx)
    if summary is not None:
        at = next((i for i, p in enumerate(out) if _pass_name(p) in _TERMINAL), len(out))
        out.insert(at, summary)
    return out


def _build_passes(name: str, file_stem: str | None, traced_result: Any, config: Any, *,
                  parallel_dims: Any = None) -> list[Callable[..., Any]]:
    """The registered pipeline `name`: GraphTrainer's default list composed with jointfx."""
    from torchtitan.experiments.graph_trainer.passes import construct_default_graph_passes
    from torchtitan.tools.logging import logger

    gt_passes = construct_default_graph_passes(traced_result, config,
                                               parallel_dims=parallel_dims)
    opts = _options(config)
    summary = _summary_pass(name)
    check_options(config)
    if file_stem is None:
        return compose(gt_passes, None, summary=summary)
    reshard = reshard_flag(config)
    spec = pipeline_spec(file_stem, opts, reshard)
    if opts.pipeline:
        logger.info(f"[jointfx] --jointfx.pipeline is given: its own tag-fsdp options decide "
                    f"resharding, not --parallelism.fsdp_reshard_after_forward ({reshard})")
    elif reshard != "default":
        logger.info(f"[jointfx] --parallelism.fsdp_reshard_after_forward: tag-fsdp{{reshard="
                    f"{reshard}}} in place of {file_stem}.json's own choice")
    keep_sac_remat = getattr(config.compile, "memory_policy", "default") == "sac_and_offload"
    jfx = _jointfx_pass(spec, traced_result, strict=opts.strict,
                        record_dir=Path(opts.record_dir) if opts.record_dir else None)
    passes = compose(gt_passes, jfx, keep_sac_remat=keep_sac_remat, summary=summary)
    logger.info(f"[jointfx] pipeline {name}: {spec}")
    return passes


def _jointfx_pass(spec: str, traced: Any, *, strict: bool,
                  record_dir: Path | None = None) -> Callable[..., fx.GraphModule]:
    from jointfx.graph_trainer import jointfx_pass

    # Placed after the memory policy (or with none left to come: compose removes SAC's remat),
    # so an untagged graph is no warning here.
    inner = jointfx_pass(spec, traced=traced, model_fn=_model, strict=strict,
                         warn_untagged=False)

    def jointfx_pass_with_groups(gm: fx.GraphModule, example_inputs: Any = None,
                                 **kwargs: Any) -> fx.GraphModule:
        import torch.distributed as dist
        from torchtitan.tools.logging import logger

        before = collective_summary(gm)
        if record_dir is not None:
            _record_graph(gm, traced, record_dir)
        gm = inner(gm, example_inputs, **kwargs)
        report = gm.meta.get("jointfx_report", {})
        for p in report.get("passes", []):
            stats = ", ".join(f"{k}={v}" for k, v in sorted(p.get("stats", {}).items()))
            logger.info(f"[jointfx] {p.get('name')}: "
                        f"{'changed' if p.get('changed') else 'unchanged'}, "
                        f"{1000 * float(p.get('seconds', 0)):.1f} ms"
                        + (f" ({stats})" if stats else ""))
        for finding in report.get("findings", []):
            logger.warning(f"[jointfx] finding: {finding}")
        logger.info("[jointfx] collectives before and after jointfx:\n"
                    + summary_table(before, collective_summary(gm)))
        # Groups the pipeline added (split-comm-groups' "<group>_rs"), on every rank.
        if dist.is_initialized():
            from jointfx.groups import register_process_groups

            register_process_groups(gm)
        return gm

    jointfx_pass_with_groups.__name__ = "jointfx_pass"
    return jointfx_pass_with_groups


def _record_graph(gm: fx.GraphModule, traced: Any, folder: Path) -> None:
    """DIR/rank<R>.graph.json: the graph the jointfx pass is given on this rank, with the
    tracer's specs, written atomically."""
    import torch.distributed as dist

    from jointfx.export import export_graph, specs_from_traced, write_graph

    rank = dist.get_rank() if dist.is_initialized() else 0
    specs = specs_from_traced(traced, _model()) if traced is not None else {}
    write_graph(export_graph(gm, **specs), folder / f"rank{rank}.graph.json")


# ----------------------------------------------------------------------------- collectives

# c10d functional ops by kind; the _out forms are what GraphTrainer's bucketing emits.
_KINDS = {"all_gather_into_tensor": "all_gather", "all_gather_into_tensor_out": "all_gather",
          "reduce_scatter_tensor": "reduce_scatter",
          "reduce_scatter_tensor_out": "reduce_scatter", "all_reduce": "all_reduce",
          "all_to_all_single": "all_to_all"}


def _kind(n: fx.Node) -> str | None:
    if n.op != "call_function":
        return None
    name = getattr(n.target, "__name__", str(n.target))  # "all_gather_into_tensor.default"
    return _KINDS.get(name.split(".")[0]) if "c10d_functional" in str(n.target) else None


def _nbytes(val: Any) -> int:
    if isinstance(val, torch.Tensor):
        return val.numel() * val.element_size()
    if isinstance(val, (list, tuple)):
        return sum(_nbytes(v) for v in val)
    return 0


def collective_summary(gm: fx.GraphModule) -> dict[str, Any]:
    """The graph's collectives by phase ("forward" covers forward and loss; "backward" is what
    autograd_backward marks) and kind: {"count", "bytes"} (output bytes), plus
    "gathers_per_parameter": for each phase, the parameter placeholders whose all-gathers occur
    more than once in it (a bucketed gather counts for each parameter it carries), which must be
    empty."""
    out: dict[str, Any] = {"forward": {}, "backward": {}}
    per_param: dict[str, dict[str, int]] = {"forward": {}, "backward": {}}
    for n in gm.graph.nodes:
        kind = _kind(n)
        if kind is None:
            continue
        phase = "backward" if n.meta.get("autograd_backward") else "forward"
        slot = out[phase].setdefault(kind, {"count": 0, "bytes": 0})
        slot["count"] += 1
        slot["bytes"] += _nbytes(n.meta.get("val"))
        if kind == "all_gather":
            for p in _gathered_placeholders(n):
                per_param[phase][p] = per_param[phase].get(p, 0) + 1
    out["gathers_per_parameter"] = {ph: {p: c for p, c in sorted(m.items()) if c > 1}
                                    for ph, m in per_param.items()}
    out["gathered_parameters"] = {ph: len(m) for ph, m in per_param.items()}
    return out


def _gathered_placeholders(gather: fx.Node) -> set[str]:
    """The placeholders an all-gather's input derives from, through anything but another
    collective (the shard's casts and views, a bucket's concatenation)."""
    seen: set[fx.Node] = set()
    found: set[str] = set()
    stack = [gather.args[0]] if gather.args and isinstance(gather.args[0], fx.Node) else []
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if x.op == "placeholder":
            if isinstance(x.meta.get("val"), torch.Tensor):
                found.add(x.name)
            continue
        if _kind(x) is not None:
            continue
        stack.extend(x.all_input_nodes)
    return found


def summary_table(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """Rows phase/kind: count and MB before -> after."""
    lines = [f"{'phase':<9} {'collective':<15} {'count':>13} {'MB':>19}"]
    for phase in ("forward", "backward"):
        kinds = sorted(set(before.get(phase, {})) | set(after.get(phase, {})))
        for kind in kinds:
            b = before.get(phase, {}).get(kind, {"count": 0, "bytes": 0})
            a = after.get(phase, {}).get(kind, {"count": 0, "bytes": 0})
            lines.append(f"{phase:<9} {kind:<15} {b['count']:>5} -> {a['count']:<5} "
                         f"{b['bytes'] / 1e6:>8.3f} -> {a['bytes'] / 1e6:<8.3f}")
    return "\n".join(lines)


def _summary_pass(name: str) -> Callable[..., fx.GraphModule]:
    def jointfx_collective_summary_pass(gm: fx.GraphModule, example_inputs: Any = None,
                                        **_: Any) -> fx.GraphModule:
        from torchtitan.tools.logging import logger

        s = collective_summary(gm)
        _State.final_collectives = s  # type: ignore[attr-defined]
        logger.info(f"[jointfx] final graph of pass pipeline {name}: collectives "
                    + json.dumps(s, sort_keys=True))
        for phase, dups in s["gathers_per_parameter"].items():
            if dups:
                logger.warning(f"[jointfx] {phase} gathers some parameters more than once: "
                               f"{dups}")
        return gm

    return jointfx_collective_summary_pass


# ----------------------------------------------------------------------------- the command

def main(argv: list[str] | None = None) -> None:
    """torchtitan's train.main with the pipelines registered and the `jointfx` config section;
    on a machine without a GPU, on CPU with gloo."""
    from jointfx.torchtitan.cli import main as cli_main

    cli_main(argv)


def _with_section(config: Any) -> Any:
    """`config` (a torchtitan Trainer.Config dataclass) as an instance of a subclass that adds
    the `jointfx: JointfxConfig` field; the subclass keeps the class's build() owner."""
    cls = _extended_class(type(config))
    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    return cls(**values)


@functools.cache
def _extended_class(base: type) -> type:
    cls = dataclasses.make_dataclass(
        base.__name__, [("jointfx", JointfxConfig, field(default_factory=JointfxConfig))],
        bases=(base,), kw_only=True, slots=True)
    cls.__qualname__ = base.__qualname__
    cls.__doc__ = base.__doc__
    return cls


register()
