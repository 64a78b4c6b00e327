#!/usr/bin/env python3
"""Measured memory (docs/executor.md, "Measured memory"), for ctest.

    check_memory.py JOINTFX log GRAPH NPROC BYTES
        `jointfx exec GRAPH --nproc NPROC --steps 2 --log DIR/log.{rank}.jsonl`: every rank writes
        its own log, and every line of it has "peak_bytes": BYTES.
    check_memory.py JOINTFX model PIPELINES -- FIXTURE...
        For each traced fixture (tests/data/traced/NAME.json, at the world it was traced for), as
        traced and after each pipeline (comma-separated paths, `-` for none): the executor's
        measured peak (largest over ranks and steps) is within 10% of `jointfx analyze
        --comm-backend gloo`'s estimated peak, the model the CPU run is checked against.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 0.10


def run(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def measured(jfx, graph, nproc, tmp):
    """Each rank's list of peak_bytes, one per step."""
    logs = Path(tempfile.mkdtemp(dir=tmp))
    run([jfx, "exec", graph, "--nproc", nproc, "--steps", "2", "--threads", "1", "--optimizer",
         "none", "-q", "--progress", "never", "--log", logs / "log.{rank}.jsonl"])
    out = []
    for r in range(int(nproc)):
        lines = (logs / f"log.{r}.jsonl").read_text().splitlines()
        rows = [json.loads(x) for x in lines]
        if len(rows) != 2 or any(row.get("rank") != r for row in rows):
            sys.exit(f"FAILED: rank {r}'s log has {len(rows)} lines, or another rank's: {lines}")
        if any("peak_bytes" not in row for row in rows):
            sys.exit(f"FAILED: rank {r}'s log has no peak_bytes: {lines}")
        out.append([row["peak_bytes"] for row in rows])
    return out


def check_log(jfx, graph, nproc, expected):
    with tempfile.TemporaryDirectory() as tmp:
        peaks = measured(jfx, graph, nproc, tmp)
    print(f"{graph}: peak_bytes per rank and step {peaks}")
    if any(p != int(expected) for rank in peaks for p in rank):
        sys.exit(f"FAILED: expected {expected} B on every rank and step")


def check_model(jfx, pipelines, fixtures):
    worst = 0.0
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in fixtures:
            src = REPO / "tests/data/traced" / f"{name}.json"
            nproc = str(json.loads(src.read_text())["meta"]["world_size"])
            for pipeline in pipelines:
                graph = Path(tmp) / f"{name}.{pipelines.index(pipeline)}.json"
                # As traced: dce removes only the dead aliases SAC leaves, which the verifier
                # rejects (a no-op elsewhere); the pipelines begin with dce themselves.
                run([jfx, "opt", src, "--no-verify", "-p", "dce" if pipeline == "-" else pipeline,
                     "-o", graph])
                report = json.loads(run([jfx, "analyze", graph, "--json", "--comm-backend",
                                         "gloo"]))
                est = report["memory"]["peak_bytes"]
                meas = max(max(rank) for rank in measured(jfx, graph, nproc, tmp))
                ratio = meas / est
                worst = max(worst, abs(ratio - 1))
                line = (f"{name} {'as traced' if pipeline == '-' else Path(pipeline).name}: "
                        f"estimated {est} B, measured {meas} B, ratio {ratio:.3f}")
                print(line)
                if abs(ratio - 1) > TOLERANCE:
                    failed.append(line)
    print(f"largest |measured / estimated - 1|: {worst:.3f}")
    if failed:
        sys.exit("FAILED: outside 10%:\n" + "\n".join(failed))


def main():
    jfx, mode, *rest = sys.argv[1:]
    if mode == "log":
        check_log(jfx, *rest)
    elif mode == "model":
        pipelines = rest[0].split(",")
        check_model(jfx, pipelines, rest[rest.index("--") + 1:])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
