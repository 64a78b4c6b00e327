"""configs/pipelines/auto.json (tag-fsdp{reshard=budget}, bucket{plan=auto}, schedule{prefetch=auto}
under one memory limit) against a grid of fixed plans at the same limit.

    python3 bench/planner.py [--jointfx build/tools/jointfx] [--out bench/results] [--quick]

Graphs: `jointfx synth --preset llama3-8b --world-size 8` (one node) and `--preset llama3-70b
--world-size 64` (8 nodes), simulated on configs/hardware/h100.json. Fixed plans: the default
pipeline with tag-fsdp{reshard=default, keep-last=K}, bucket{plan=blocks} or bucket{plan=size,
cap-mb=16|64|256}, schedule{prefetch=1|2|3}, every bucket and schedule with memory-limit=none
(so the grid holds every plan, and a plan is feasible at a limit when its final estimated peak is
within it). keep-last is subsampled: every `--k-step`-th K from 0 plus the last (units = reshard
never); the full K range is in bench/results/reshard_budget.txt. At five limits spread between
the peaks of keep-last=0 and keep-last=units (default pipeline), auto.json with
`--set memory-limit=X`: its estimated peak must be <= X, and its simulated step is compared with
the best feasible fixed plan and with the simulator's lower bound of its own graph (step / bound,
as `jointfx analyze --hardware` prints it). Planning time: CPU time of `jointfx opt` for the auto
pipeline (load, passes, verification, save), and the bucket and schedule rows of `--timing`
(wall time on a shared box).
Results: <out>/planner.txt and planner.json.
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
H100 = str(REPO / "configs/hardware/h100.json")
BUCKETS = {"blocks": "bucket{plan=blocks,kinds=ag,rs,ar,memory-limit=none}",
           "size16": "bucket{plan=size,cap-mb=16,kinds=ag,rs,ar,memory-limit=none}",
           "size64": "bucket{plan=size,cap-mb=64,kinds=ag,rs,ar,memory-limit=none}",
           "size256": "bucket{plan=size,cap-mb=256,kinds=ag,rs,ar,memory-limit=none}"}


def run(cmd: list[str]) -> tuple[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p.stdout + p.stderr, cpu


def simulate(jfx: str, graph: Path) -> dict:
    text, _ = run([jfx, "analyze", str(graph), "--json", "--hardware", H100])
    sim = json.loads(text)["simulation"]
    return {"peak": sim["peak_memory_bytes"], "step_s": sim["step_s"],
            "exposed_s": sim["exposed_comm_s"], "bound_s": sim["lower_bound_s"],
            "step_over_bound": sim["step_over_bound"]}


def gib(b: int) -> str:
    return f"{b / 2**30:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jointfx", default=str(REPO / "build/tools/jointfx"))
    ap.add_argument("--out", default=str(REPO / "bench/results"))
    ap.add_argument("--k-step", type=int, default=0,
                    help="keep-last sampling step (default: units / 8, at least 1)")
    args = ap.parse_args()
    jfx = str(Path(args.jointfx).resolve())
    lines: list[str] = []
    report: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for preset, world in (("llama3-8b", 8), ("llama3-70b", 64)):
            graph = Path(tmp) / f"{preset}.json"
            run([jfx, "synth", "--preset", preset, "--world-size", str(world), "-o", str(graph)])
            text, _ = run([jfx, "opt", str(graph), "-o", str(Path(tmp) / "probe.json"), "-p",
                           "dce,tag-fsdp{reshard=budget,memory-limit=1000000G}", "--remarks"])
            units = int(re.search(r"keeping the last \d+ of (\d+) units", text).group(1))
            step = args.k_step or max(1, units // 8)
            ks = sorted(set(range(0, units + 1, step)) | {units})
            grid = []
            for k in ks:
                pre = Path(tmp) / "pre.json"
                run([jfx, "opt", str(graph), "-o", str(pre), "-p",
                     f"dce,tag-fsdp{{reshard=default,keep-last={k}}},remat,dedup-fsdp-unshard"])
                for bname, bucket in BUCKETS.items():
                    for pf in (1, 2, 3):
                        out = Path(tmp) / "fixed.json"
                        run([jfx, "opt", str(pre), "-o", str(out), "-p",
                             f"{bucket},split-comm-groups,schedule{{prefetch={pf},"
                             "memory-limit=none}"])
                        grid.append({"keep_last": k, "bucket": bname, "prefetch": pf,
                                     **simulate(jfx, out)})
            # The limits: the default pipeline's peaks at keep-last 0 and units.
            lo_out, hi_out = Path(tmp) / "lo.json", Path(tmp) / "hi.json"
            for k, out in ((0, lo_out), (units, hi_out)):
                run([jfx, "opt", str(graph), "-o", str(out), "-p",
                     str(REPO / "configs/pipelines/default.json"), "--set",
                     f"tag-fsdp.keep-last={k}"])
            lo, hi = simulate(jfx, lo_out)["peak"], simulate(jfx, hi_out)["peak"]
            lines.append(f"{preset} world {world}: {units} units; grid {len(grid)} fixed plans"
                         f" (keep-last {','.join(map(str, ks))} x bucket"
                         f" {'/'.join(BUCKETS)} x prefetch 1..3); limits {gib(lo)} .. {gib(hi)}"
                         " GiB")
            lines.append("  limit GiB | auto peak GiB | auto step ms | step/bound | best fixed"
                         " (K, bucket, prefetch) | its step ms | auto - best (ms) | opt CPU s |"
                         " bucket s | schedule s | auto choices")
            rows = []
            for i in range(5):
                limit = lo + (hi - lo) * i // 4
                out = Path(tmp) / "auto.json"
                text, cpu = run([jfx, "opt", str(graph), "-o", str(out), "-p",
                                 str(REPO / "configs/pipelines/auto.json"), "--set",
                                 f"memory-limit={limit}", "--set", f"hardware={H100}",
                                 "--remarks", "--timing"])
                a = simulate(jfx, out)
                times = {m.group(1): float(m.group(2)) for m in re.finditer(
                    r"^\s+\d+\s+(bucket|schedule)\{.*?\}\s+([0-9.]+)", text, re.M)}
                keep = re.search(r"keep-last=(\d+)\)", text)
                plan = re.search(r"plan=auto chose '([^']+)'", text)
                pf = re.search(r"prefetch=auto chose K=(\d+)", text)
                choice = (f"K={keep.group(1) if keep else '?'}, {plan.group(1) if plan else '?'},"
                          f" prefetch {pf.group(1) if pf else '?'}")
                feasible = [g for g in grid if g["peak"] <= limit]
                best = min(feasible, key=lambda g: g["step_s"]) if feasible else None
                rows.append({"limit": limit, "auto": a, "auto_choice": choice,
                             "opt_cpu_s": cpu, "pass_s": times, "best_fixed": best})
                best_txt = (f"({best['keep_last']}, {best['bucket']}, {best['prefetch']})"
                            if best else "none fits")
                lines.append(
                    f"  {gib(limit):>9} | {gib(a['peak']):>13} | {a['step_s'] * 1e3:12.1f} |"
                    f" {a['step_over_bound']:10.3f} | {best_txt:>29} |"
                    f" {best['step_s'] * 1e3 if best else float('nan'):11.1f} |"
                    f" {(a['step_s'] - best['step_s']) * 1e3 if best else float('nan'):16.2f} |"
                    f" {cpu:9.2f} | {times.get('bucket', float('nan')):8.2f} |"
                    f" {times.get('schedule', float('nan')):10.2f} | {choice}"
                    + ("" if a["peak"] <= limit else "  OVER THE LIMIT"))
            report[preset] = {"world": world, "units": units, "keep_last_sampled": ks,
                              "grid": grid, "limits": [lo, hi], "auto": rows}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "planner.txt").write_text("\n".join(lines) + "\n")
    Path(args.out, "planner.json").write_text(json.dumps(report, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
