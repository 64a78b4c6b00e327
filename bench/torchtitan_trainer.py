"""torchtitan's GraphTrainer with and without jointfx: `python -m jointfx.torchtitan` under
torchrun on 2 gloo ranks (CPU; --nproc), the llama3 debugmodel's `_sdpa` config (--module and
--config: e.g. `--module jointfx.torchtitan.configs --config
graph_trainer_deepseek_v3_debugmodel_sdpa`), for each of
`--compile.pass_pipeline graph_trainer | jointfx | jointfx_auto`, with the data and tokenizer
made by jointfx.torchtitan.toy_data. Prints per-step losses (bitwise comparison against
graph_trainer), the final graph's collectives, step seconds (median of steps 2..N: step 1 traces
and runs the passes) and peak RSS (per rank, from the record; the whole run's from
/usr/bin/time -v).

    .venv/bin/python bench/torchtitan_trainer.py [--steps 10] [--out /tmp/tt-bench] [--nproc 2]
        [--module M --config C] [extra args]

Extra arguments go to every run (e.g. --jointfx.memory_limit 4GiB). Needs scripts/build.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PIPELINES = ("graph_trainer", "jointfx", "jointfx_auto")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trainer_env() -> dict[str, str]:
    """The environment every trainer run gets: one intra-op thread, no hub access, this
    checkout's jointfx and its built extension first on the path."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(REPO / "build" / "python"),
                                           os.environ.get("PYTHONPATH", "")])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", default="/tmp/tt-bench")
    p.add_argument("--pipelines", default=",".join(PIPELINES))
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--module", default="graph_trainer.llama3")
    p.add_argument("--config", default="graph_trainer_llama3_debugmodel_sdpa")
    a, extra = p.parse_known_args()
    out = Path(a.out)
    env = trainer_env()
    subprocess.run([sys.executable, "-m", "jointfx.torchtitan.toy_data", str(out / "assets")],
                   env=env, check=True, capture_output=True)
    records: dict[str, list[dict]] = {}
    wall: dict[str, tuple[str, int]] = {}
    for pipeline in a.pipelines.split(","):
        rec = out / pipeline
        rec.mkdir(parents=True, exist_ok=True)
        cmd = ["/usr/bin/time", "-v", "-o", str(rec / "time.txt"),
               sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(a.nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(_port()),
               "-m", "jointfx.torchtitan", "--module", a.module, "--config", a.config,
               "--compile.pass_pipeline", pipeline,
               "--hf_assets_path", str(out / "assets" / "tokenizer"),
               "--dataloader.dataset_path", str(out / "assets" / "data"),
               "--training.steps", str(a.steps), "--training.seq_len", "128",
               "--training.local_batch_size", "2", "--debug.seed", "42",
               "--debug.deterministic", "--dump_folder", str(rec / "dump"),
               "--jointfx.record_dir", str(rec), *extra]
        print("$", " ".join(cmd[4:]), flush=True)
        r = subprocess.run(cmd, env=env, cwd=rec, capture_output=True, text=True)
        (rec / "log.txt").write_text(r.stdout + r.stderr)
        if r.returncode != 0:
            print(f"{pipeline}: exit {r.returncode}, see {rec / 'log.txt'}")
            return 1
        records[pipeline] = [json.loads((rec / f"rank{k}.json").read_text())
                             for k in range(a.nproc)]
        t = (rec / "time.txt").read_text()
        wall[pipeline] = (re.search(r"Elapsed \(wall clock\) time.*: (\S+)", t).group(1),
                          int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)
                              .group(1)))
    base = records.get("graph_trainer")
    print()
    print("| pipeline | losses = graph_trainer | fwd all-gather | bwd all-gather | "
          "reduce-scatter | bwd all-reduce | each <= graph_trainer | twice in a phase | "
          "step s (median) | first step s | peak RSS rank 0/1 MiB | wall, peak RSS (time -v) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pipeline, recs in records.items():
        c = recs[0]["collectives"]

        def cell(phase: str, kind: str) -> str:
            v = c[phase].get(kind)
            return f"{v['count']}, {v['bytes'] / 1e6:.2f} MB" if v else "none"

        same = ("-" if base is None else
                "bitwise" if all(recs[k]["losses"] == base[k]["losses"] for k in range(a.nproc))
                else "DIFFERENT")
        within = "-" if base is None else "yes" if all(
            v["count"] <= b.get(kind, {"count": 0})["count"]
            and v["bytes"] <= b.get(kind, {"bytes": 0})["bytes"]
            for phase in ("forward", "backward")
            for b in [base[0]["collectives"][phase]]
            for kind, v in c[phase].items()) else "NO"
        dups = sum(len(v) for v in c["gathers_per_parameter"].values())
        steps = recs[0]["step_seconds"]
        print(f"| {pipeline} | {same} | {cell('forward', 'all_gather')} | "
              f"{cell('backward', 'all_gather')} | {cell('backward', 'reduce_scatter')} | "
              f"{cell('backward', 'all_reduce')} | {within} | "
              f"{dups} | {statistics.median(steps[1:]):.2f} | {steps[0]:.1f} | "
              f"{recs[0]['peak_rss_bytes'] >> 20}/{recs[1]['peak_rss_bytes'] >> 20} | "
              f"{wall[pipeline][0]}, {wall[pipeline][1] >> 10} MiB |")
    print()
    for pipeline, recs in records.items():
        for k in range(a.nproc):
            print(f"{pipeline} rank {k} losses:",
                  " ".join(f"{float.fromhex(x):.9g}" for x in recs[k]["losses"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
