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

    python3 bench/planner.py --time-only [--before OLD/jointfx] [--repeat 5]

times the planning alone (no grid), at each shape's middle limit: CPU seconds (user + sys of the
child; the median of --repeat runs, and the smallest, the least disturbed by other jobs on a
shared box) of `bucket{plan=auto}` on the graph tag-fsdp, remat and dedup-fsdp-unshard leave, and of
`schedule{prefetch=auto}` on what bucket and split-comm-groups leave, each minus the same
`jointfx opt` running `dce` on that graph (load, a scan, save), and of the whole auto.json run
with verification; and the two passes' own CPU time, the `cpu s` column of `--timing` (the process
CPU time over the pass alone, all its threads: no process start, load or save, and no
difference of two noisy figures). With --before, an older build is timed too, run for run interleaved with
this one so both see the same load, and its outputs must be byte-identical. Results:
<out>/planner_time.txt and planner_time.json.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
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


def limits(jfx: str, graph: Path, tmp: str) -> tuple[int, int, int]:
    """Units, and the default pipeline's peaks at keep-last 0 and units (the limits' range)."""
    text, _ = run([jfx, "opt", str(graph), "-o", str(Path(tmp) / "probe.json"), "-p",
                   "dce,tag-fsdp{reshard=budget,memory-limit=1000000G}", "--remarks"])
    units = int(re.search(r"keeping the last \d+ of (\d+) units", text).group(1))
    peaks = []
    for k in (0, units):
        out = Path(tmp) / f"peak{k}.json"
        run([jfx, "opt", str(graph), "-o", str(out), "-p",
             str(REPO / "configs/pipelines/default.json"), "--set", f"tag-fsdp.keep-last={k}"])
        peaks.append(simulate(jfx, out)["peak"])
    return units, peaks[0], peaks[1]


def time_only(args: argparse.Namespace, jfx: str) -> None:
    """Planning time of bucket{plan=auto} and schedule{prefetch=auto} (module docstring)."""
    builds = {"after": jfx}
    if args.before:
        builds["before"] = str(Path(args.before).resolve())
    load = Path("/proc/loadavg").read_text().split()[:3]
    lines = [f"planning time, CPU s: median (min) of {args.repeat} runs; load average at start"
             f" {' '.join(load)}"]
    report: dict = {"load_average_start": load, "repeat": args.repeat, "shapes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for preset, world in (("llama3-8b", 8), ("llama3-70b", 64)):
            graph = Path(tmp) / f"{preset}.json"
            run([jfx, "synth", "--preset", preset, "--world-size", str(world), "-o", str(graph)])
            _, lo, hi = limits(jfx, graph, tmp)
            limit = (lo + hi) // 2
            pre, mid = Path(tmp) / "pre.jfx", Path(tmp) / "mid.jfx"
            run([jfx, "opt", str(graph), "-o", str(pre), "-p",
                 f"dce,tag-fsdp{{reshard=budget,memory-limit={limit}}},remat,dedup-fsdp-unshard"])
            bucket = f"bucket{{plan=auto,kinds=ag,rs,ar,memory-limit={limit},hardware={H100}}}"
            sched = f"schedule{{prefetch=auto,memory-limit={limit},hardware={H100}}}"
            run([jfx, "opt", str(pre), "-o", str(mid), "-p", f"{bucket},split-comm-groups"])
            jobs = {"load+dce (pre)": (pre, "dce", ["--no-verify"]),
                    "bucket plan=auto": (pre, bucket, ["--no-verify", "--timing"]),
                    "load+dce (mid)": (mid, "dce", ["--no-verify"]),
                    "schedule prefetch=auto": (mid, sched, ["--no-verify", "--timing"]),
                    "whole auto.json": (graph, str(REPO / "configs/pipelines/auto.json"),
                                        ["--set", f"memory-limit={limit}",
                                         "--set", f"hardware={H100}"])}
            cpu = {b: {j: [] for j in jobs} for b in builds}
            pass_cpu = {b: {"bucket": [], "schedule": []} for b in builds}
            pass_wall = {b: {"bucket": [], "schedule": []} for b in builds}
            outs: dict = {}
            for _ in range(args.repeat):
                for job, (src, pipeline, extra) in jobs.items():
                    for b, exe in builds.items():
                        out = Path(tmp) / f"{b}.jfx"
                        text, c = run([exe, "opt", str(src), "-o", str(out), "-p", pipeline,
                                       *extra])
                        cpu[b][job].append(c)
                        outs[b] = out.read_bytes()
                        # The pass's own CPU time, all threads (the `cpu s` column of --timing).
                        for m in re.finditer(r"^\s+\d+\s+(bucket|schedule)\{.*?\}\s+([0-9.]+)"
                                             r"\s+([0-9.]+)\s+[0-9.]+\s+(?:yes|no)$", text, re.M):
                            pass_wall[b][m.group(1)].append(float(m.group(2)))
                            pass_cpu[b][m.group(1)].append(float(m.group(3)))
                    if len(builds) > 1 and outs["before"] != outs["after"]:
                        sys.exit(f"{preset} {job}: the two builds' outputs differ")
            row = {}
            for b in builds:
                row[b] = {"raw": cpu[b], "pass_cpu_raw": pass_cpu[b], "pass_wall_raw": pass_wall[b]}
                for stat, f in (("median", statistics.median), ("min", min)):
                    m = {j: f(v) for j, v in cpu[b].items()}
                    r = {"bucket_s": m["bucket plan=auto"] - m["load+dce (pre)"],
                         "schedule_s": m["schedule prefetch=auto"] - m["load+dce (mid)"],
                         "whole_opt_s": m["whole auto.json"]}
                    r["planning_s"] = r["bucket_s"] + r["schedule_s"]
                    if pass_cpu[b]["bucket"] and pass_cpu[b]["schedule"]:
                        r["pass_cpu_bucket_s"] = f(pass_cpu[b]["bucket"])
                        r["pass_cpu_schedule_s"] = f(pass_cpu[b]["schedule"])
                        r["pass_cpu_planning_s"] = (r["pass_cpu_bucket_s"]
                                                    + r["pass_cpu_schedule_s"])
                        r["pass_wall_planning_s"] = (f(pass_wall[b]["bucket"])
                                                     + f(pass_wall[b]["schedule"]))
                    row[b][stat] = r
            report["shapes"][preset] = {"world": world, "limit": limit, **row}
            lines.append(f"{preset} world {world}, memory-limit {gib(limit)} GiB:")
            for b in builds:
                md, mn = row[b]["median"], row[b]["min"]
                lines.append(
                    f"  {b:>6}: bucket{{plan=auto}} {md['bucket_s']:.3f} ({mn['bucket_s']:.3f}) +"
                    f" schedule{{prefetch=auto}} {md['schedule_s']:.3f} ({mn['schedule_s']:.3f}) ="
                    f" {md['planning_s']:.3f} ({mn['planning_s']:.3f}) s; whole auto.json opt"
                    f" {md['whole_opt_s']:.3f} ({mn['whole_opt_s']:.3f}) s")
                if "pass_cpu_planning_s" in md:
                    lines.append(
                        f"  {b:>6}: pass CPU (--timing): bucket {md['pass_cpu_bucket_s']:.3f}"
                        f" ({mn['pass_cpu_bucket_s']:.3f}) + schedule"
                        f" {md['pass_cpu_schedule_s']:.3f} ({mn['pass_cpu_schedule_s']:.3f}) ="
                        f" {md['pass_cpu_planning_s']:.3f} ({mn['pass_cpu_planning_s']:.3f}) s;"
                        f" wall {md['pass_wall_planning_s']:.3f}"
                        f" ({mn['pass_wall_planning_s']:.3f}) s")
    lines.append(f"load average at end {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    report["load_average_end"] = Path("/proc/loadavg").read_text().split()[:3]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "planner_time.txt").write_text("\n".join(lines) + "\n")
    Path(args.out, "planner_time.json").write_text(json.dumps(report, indent=1) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jointfx", default=str(REPO / "build/tools/jointfx"))
    ap.add_argument("--out", default=str(REPO / "bench/results"))
    ap.add_argument("--k-step", type=int, default=0,
                    help="keep-last sampling step (default: units / 8, at least 1)")
    ap.add_argument("--time-only", action="store_true",
                    help="time the planning passes only (no grid): planner_time.txt")
    ap.add_argument("--before", default="",
                    help="--time-only: an older jointfx build to time beside this one")
    ap.add_argument("--repeat", type=int, default=5, help="--time-only: runs per figure")
    args = ap.parse_args()
    jfx = str(Path(args.jointfx).resolve())
    if args.time_only:
        time_only(args, jfx)
        return
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
