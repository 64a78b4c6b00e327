"""Speed at the Python boundary: jointfx in process on an existing GraphModule, against the
`jointfx opt` CLI on the same graph and against the Python passes of torch/torchtitan that do the
same work on the same GraphModule, side by side in one run.

    .venv/bin/python bench/boundary.py [--preset llama3-8b] [--runs 3] [--out bench/results]

The graph is `jointfx synth --preset llama3-8b` (9,876 nodes, world 8). Each figure is CPU
seconds of one process (time.process_time, or the child's rusage for the CLI), the median of
--runs, each run on a freshly imported GraphModule (the passes edit it; importing is not timed):

| row | what is timed |
|---|---|
| cli_opt_default | `jointfx opt G -p configs/pipelines/default.json -o out.json`: load, passes, save |
| inproc_default | `run_pipeline(gm, default.json)` on an existing GraphModule: export, C++, back |
| torchtitan_bucketing | torchtitan 0.3.0's joint_transformer_block_bucketing_reordering_pass (per-block plans) |
| inproc_bucket | `run_pipeline(gm, "bucket,split-comm-groups,schedule")` (plan=blocks, as default.json) |
| torch_remat | torch's remat_using_tags_for_fwd_loss_bwd_graph after jointfx's tags (tags not timed) |
| inproc_remat | `run_pipeline(gm, "tag-fsdp,remat")` |

For the three in-process rows, the report's `boundary_seconds` splits each call (wall seconds,
median): export (FX graph to document), cxx (reading, passes, edit script) and apply.

Ratios: inproc_default / cli_opt_default (target <= 2), torchtitan_bucketing / inproc_bucket and
torch_remat / inproc_remat (target >= 20). Results: <out>/boundary.txt and boundary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "python"), str(REPO / "build" / "python")]
DEFAULT = REPO / "configs" / "pipelines" / "default.json"
INPROC = {"inproc_default": str(DEFAULT),
          "inproc_bucket": "bucket{plan=blocks,kinds=ag,rs,ar},split-comm-groups,"
                           "schedule{prefetch=1}",
          "inproc_remat": "tag-fsdp,remat"}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="llama3-8b")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    p.add_argument("--bin", default=str(REPO / "build" / "tools" / "jointfx"))
    p.add_argument("--skip-torchtitan", action="store_true")
    a = p.parse_args()
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    from jointfx import import_graph, load_graph, run_pipeline

    logging_quiet()
    tmp = Path(tempfile.mkdtemp(prefix="jfx-boundary-"))
    graph = tmp / "graph.json"
    subprocess.run([a.bin, "synth", "--preset", a.preset, "-o", str(graph)], check=True)
    doc = load_graph(graph)
    nodes = len(doc["nodes"])
    world = doc["process_groups"][0]["size"]
    rows: dict[str, list[float]] = {k: [] for k in (
        "cli_opt_default", "inproc_default", "torchtitan_bucketing", "inproc_bucket",
        "torch_remat", "inproc_remat")}

    def fresh():
        return import_graph(doc)

    # torchtitan's bucketer resolves the graph's group by name: a fake group of the graph's size.
    if not a.skip_torchtitan:
        from jointfx.titan import init_fake_world

        init_fake_world(world, 0)
        from torchtitan.experiments.graph_trainer.common_utils import (
            get_default_transformer_block_buckets,
        )
        from torchtitan.experiments.graph_trainer.fsdp_passes import (
            get_fsdp_param_module_order,
            joint_transformer_block_bucketing_reordering_pass,
        )
        n_layers = len({str(n["meta"]["custom"]["module_fqn"]).split(".")[1]
                        for n in doc["nodes"]
                        if str(n.get("meta", {}).get("custom", {}).get("module_fqn", ""))
                        .startswith("layers.")})
        plans = get_default_transformer_block_buckets(n_layers)
        order = get_fsdp_param_module_order([i["fqn"] for i in doc["inputs"]
                                             if i["kind"] == "parameter"])
    from torch._functorch._activation_checkpointing.remat_using_tags_for_fwd_loss_bwd_graph_pass \
        import remat_using_tags_for_fwd_loss_bwd_graph

    stages = {row: {"export": [], "cxx": [], "apply": []} for row in INPROC}
    for _ in range(a.runs):
        before = _children_cpu()
        subprocess.run([a.bin, "opt", str(graph), "-p", str(DEFAULT), "-o", str(tmp / "o.json")],
                       check=True)
        rows["cli_opt_default"].append(_children_cpu() - before)
        for row, pipeline in INPROC.items():
            gm = fresh()
            rows[row].append(_cpu(lambda: run_pipeline(gm, pipeline)))
            for part, sec in gm.meta["jointfx_report"]["boundary_seconds"].items():
                stages[row][part].append(sec)
        tagged = run_pipeline(fresh(), "tag-fsdp")
        rows["torch_remat"].append(_cpu(lambda: remat_using_tags_for_fwd_loss_bwd_graph(tagged)))
        if not a.skip_torchtitan:
            gm = fresh()
            rows["torchtitan_bucketing"].append(_cpu(
                lambda: joint_transformer_block_bucketing_reordering_pass(
                    gm, None, module_bucket_plans=plans, fsdp_param_module_order=order)))
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    ratios = {
        "inproc_default / cli_opt_default": med["inproc_default"] / med["cli_opt_default"],
        "torch_remat / inproc_remat": med["torch_remat"] / med["inproc_remat"],
    }
    if "torchtitan_bucketing" in med:
        ratios["torchtitan_bucketing / inproc_bucket"] = (med["torchtitan_bucketing"]
                                                          / med["inproc_bucket"])
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    stage_med = {row: {part: statistics.median(v) for part, v in parts.items()}
                 for row, parts in stages.items()}
    result = {"graph": f"jointfx synth --preset {a.preset}", "nodes": nodes, "runs": a.runs,
              "cpu_seconds_median": med, "cpu_seconds_all": rows, "ratios": ratios,
              "stage_wall_seconds_median": stage_med,
              "commit": commit, "machine": platform.processor() or platform.machine(),
              "loadavg": os.getloadavg()}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "boundary.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"boundary: {result['graph']} ({nodes} nodes), median of {a.runs} runs, CPU s, "
             f"commit {commit}, load {os.getloadavg()[0]:.1f}"]
    lines += [f"  {k:24s} {v:8.3f}" for k, v in med.items()]
    lines += [f"  {k:40s} {v:8.2f}x" for k, v in ratios.items()]
    lines += [f"  {row:24s} stages, wall s: " + ", ".join(f"{p} {v:.3f}" for p, v in parts.items())
              for row, parts in stage_med.items()]
    (out / "boundary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def logging_quiet() -> None:
    import logging

    logging.getLogger("jointfx").setLevel(logging.ERROR)
    # torchtitan's bucketer asks Inductor for cost estimates: one warning per collective on CPU.
    logging.getLogger("torch._inductor.utils").setLevel(logging.ERROR)


if __name__ == "__main__":
    sys.exit(main())
