"""`jointfx opt` with the default pipeline at 10^4, 10^5 and 10^6 nodes and on the llama3-70b
shape: the per-pass table (`--timing`, with its verify and hash rows) and the whole command's CPU
seconds and peak RSS (load, passes, verification, save), the figures issue 14 asks for.

    .venv/bin/python bench/opt_scaling.py [--jointfx build-release/tools/jointfx] [--runs 3]
        [--sizes 10000,100000,1000000] [--out bench/results] [--name opt_scaling]

Graphs come from `jointfx synth` (`--target-nodes N`; `--preset llama3-70b --world-size 64`),
written as JSON. Each figure is the median of --runs runs (the per-pass rows of the run whose
CPU time is the median). CPU seconds are the command's user + system time and peak RSS its
largest resident set (GNU time): other jobs on the machine inflate wall time (the --timing rows)
but not these. Results: <out>/opt_scaling.txt and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO / "configs" / "pipelines" / "default.json"
ROW = re.compile(r"^\s*(\d+\s+)?(\S.*?)\s{2,}([0-9.]+)\s+([0-9.]+)\s+(.*)$")


def run_opt(jfx: str, graph: Path, out: Path) -> dict:
    """One `jointfx opt --timing` run: CPU seconds, peak RSS and the timing rows."""
    # GNU time reports the command's own CPU time and peak RSS (a child forked from this process
    # would count the Python process's RSS as its starting high-water mark).
    p = subprocess.run(["/usr/bin/time", "-f", "JFXTIME %U %S %M", jfx, "opt", str(graph), "-p",
                        str(DEFAULT), "-o", str(out), "--timing"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"jointfx opt failed on {graph}:\n{p.stderr}")
    stderr = p.stderr
    user, system, rss_kb = next(line.split()[1:] for line in stderr.splitlines()
                                if line.startswith("JFXTIME "))
    rows: dict[str, float] = {}
    total = None
    for line in stderr.splitlines():
        if line.startswith("===== pass timing"):
            total = float(re.search(r"total ([0-9.]+) s", line).group(1))
            continue
        m = ROW.match(line)
        if m and m.group(2) not in ("pass",):
            rows[m.group(2).strip()] = float(m.group(3))
    cpu = float(user) + float(system)
    return {"cpu_s": cpu, "peak_rss_mb": int(rss_kb) / 1024, "pipeline_s": total,
            "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jointfx", default=str(REPO / "build-release" / "tools" / "jointfx"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--name", default="opt_scaling",
                    help="results file stem (opt_scaling_pgo for the scripts/build-pgo build)")
    a = ap.parse_args()
    jfx = str(Path(a.jointfx).resolve())
    sizes = [int(s) for s in a.sizes.split(",") if s]
    results = []
    with tempfile.TemporaryDirectory(prefix="jfx-opt-scaling-") as tmp:
        cases = [("llama3-70b w64", ["--preset", "llama3-70b", "--world-size", "64"])]
        cases += [(f"synth {n}", ["--target-nodes", str(n)]) for n in sizes]
        for label, synth_args in cases:
            graph = Path(tmp) / "graph.json"
            subprocess.run([jfx, "synth", *synth_args, "-o", str(graph)], check=True)
            # The writer puts one node per line, each with an "op" key; no 300 MB json.loads.
            with graph.open("rb") as f:
                nodes = sum(line.count(b'"op":') for line in f)
            runs = [run_opt(jfx, graph, Path(tmp) / "out.json") for _ in range(a.runs)]
            runs.sort(key=lambda r: r["cpu_s"])
            mid = runs[len(runs) // 2]
            results.append({"graph": label, "nodes": nodes, "json_mb": graph.stat().st_size / 1e6,
                            "cpu_s_median": mid["cpu_s"],
                            "cpu_s_all": [r["cpu_s"] for r in runs],
                            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                            "pipeline_s": mid["pipeline_s"], "rows": mid["rows"]})
            print(f"{label}: {mid['cpu_s']:.3f} CPU s, {results[-1]['peak_rss_mb']:.0f} MB",
                  flush=True)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    lines = [f"jointfx opt -p configs/pipelines/default.json --timing, median of {a.runs} runs, "
             f"commit {commit}, {a.jointfx}, load {os.getloadavg()[0]:.1f}",
             "graph | nodes | CPU s (load+passes+save) | peak RSS MB | pipeline s (timing)"]
    for r in results:
        lines.append(f"{r['graph']} | {r['nodes']} | {r['cpu_s_median']:.3f} | "
                     f"{r['peak_rss_mb']:.0f} | {r['pipeline_s']:.3f}")
    names = []
    for r in results:
        for k in r["rows"]:
            if k not in names:
                names.append(k)
    lines.append("")
    lines.append("row (wall s in --timing) | " + " | ".join(r["graph"] for r in results))
    for k in names:
        lines.append(k + " | " + " | ".join(
            f"{r['rows'][k]:.4f}" if k in r["rows"] else "-" for r in results))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{a.name}.json").write_text(json.dumps(
        {"commit": commit, "jointfx": a.jointfx, "runs": a.runs, "results": results},
        indent=1) + "\n")
    (out / f"{a.name}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
