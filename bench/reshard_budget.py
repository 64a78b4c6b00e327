"""tag-fsdp{reshard=budget}: the plan it picks under a memory limit, against every fixed
keep-last plan of the default pipeline at the same limit.

    python3 bench/reshard_budget.py [--jointfx build/tools/jointfx] [--out bench/results]

Graphs: `jointfx synth --preset llama3-8b --world-size 8` and `--preset llama3-70b --world-size
64`. For each, the default pipeline (configs/pipelines/default.json) with tag-fsdp keep-last=K for
every K from 0 (reshard=always) to the number of units (reshard=never) gives the grid of fixed
plans: final estimated peak (memory analysis) and simulated step (`analyze --hardware h100`).
Then at five memory limits spread between the `always` and `never` peaks, the same pipeline with
`tag-fsdp{reshard=budget, memory-limit=X}`: its peak must be <= X, and its step is compared with
the best fixed plan whose peak is <= X. Planning time is the CPU time of `jointfx opt` (load,
passes, save) for the budget pipeline, against the default pipeline.
Results: <out>/reshard_budget.txt and reshard_budget.json.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TAIL = ("remat,dedup-fsdp-unshard,bucket{plan=blocks,kinds=ag,rs,ar},split-comm-groups,"
        "schedule{prefetch=1}")


def run(cmd: list[str]) -> tuple[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p.stdout + p.stderr, cpu


def plan(jfx: str, graph: Path, tag: str, out: Path) -> dict:
    text, cpu = run([jfx, "opt", str(graph), "-p", f"dce,{tag},{TAIL}", "-o", str(out),
                     "--remarks"])
    analysis, _ = run([jfx, "analyze", str(out), "--json", "--hardware",
                       str(REPO / "configs/hardware/h100.json")])
    sim = json.loads(analysis)["simulation"]
    m = re.search(r"keeping the last (\d+) of (\d+) units", text)
    return {"tag": tag, "peak": sim["peak_memory_bytes"], "step_s": sim["step_s"],
            "exposed_s": sim["exposed_comm_s"], "bound": sim["step_over_bound"],
            "opt_cpu_s": cpu, "keep_last": int(m.group(1)) if m else None,
            "units": int(m.group(2)) if m else None}


def gib(b: int) -> str:
    return f"{b / 2**30:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jointfx", default=str(REPO / "build/tools/jointfx"))
    ap.add_argument("--out", default=str(REPO / "bench/results"))
    args = ap.parse_args()
    lines: list[str] = []
    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for preset, world in (("llama3-8b", 8), ("llama3-70b", 64)):
            graph = Path(tmp) / f"{preset}.json"
            run([args.jointfx, "synth", "--preset", preset, "--world-size", str(world), "-o",
                 str(graph)])
            out = Path(tmp) / "out.json"
            probe = plan(args.jointfx, graph, "tag-fsdp{reshard=budget,memory-limit=1000000G}", out)
            units = probe["units"]
            grid = [plan(args.jointfx, graph, f"tag-fsdp{{reshard=default,keep-last={k}}}", out)
                    for k in range(units + 1)]
            for k, g in enumerate(grid):
                g["keep_last"] = k
            lo, hi = grid[0]["peak"], grid[-1]["peak"]
            lines.append(f"{preset} world {world}: {units} units; fixed plans keep-last 0..{units}:"
                         f" peak {gib(lo)} .. {gib(hi)} GiB, step {grid[0]['step_s'] * 1e3:.1f} .."
                         f" {grid[-1]['step_s'] * 1e3:.1f} ms; default pipeline opt"
                         f" {grid[1]['opt_cpu_s']:.2f} CPU s")
            lines.append("  limit GiB | budget K | peak GiB | step ms | step/bound | best fixed K"
                         " | its step ms | budget - best (ms) | opt CPU s")
            rows = []
            for i in range(5):
                limit = lo + (hi - lo) * i // 4
                b = plan(args.jointfx, graph,
                         f"tag-fsdp{{reshard=budget,memory-limit={limit}}}", out)
                feasible = [g for g in grid if g["peak"] <= limit]
                best = min(feasible, key=lambda g: g["step_s"])
                rows.append({"limit": limit, "budget": b, "best_fixed": best})
                lines.append(f"  {gib(limit):>9} | {b['keep_last']:>8} | {gib(b['peak']):>8} |"
                             f" {b['step_s'] * 1e3:7.1f} | {b['bound']:10.3f} |"
                             f" {best['keep_last']:>12} | {best['step_s'] * 1e3:11.1f} |"
                             f" {(b['step_s'] - best['step_s']) * 1e3:18.2f} |"
                             f" {b['opt_cpu_s']:.2f}"
                             + ("" if b["peak"] <= limit else "  OVER THE LIMIT"))
            report[preset] = {"world": world, "units": units, "grid": grid, "budget": rows}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "reshard_budget.txt").write_text("\n".join(lines) + "\n")
    Path(args.out, "reshard_budget.json").write_text(json.dumps(report, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
