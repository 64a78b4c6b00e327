"""Stress loop of torchtitan's trainer with jointfx on CPU: RUNS consecutive short runs (3 steps
by default) of `python -m jointfx.torchtitan` under torchrun on 2 gloo ranks, the llama3
debugmodel's `_sdpa` config, for each `--compile.pass_pipeline` given; counts the runs that
failed and how (a signal, heap-corruption text from glibc, another exit). The crash it looks for
is gloo's worker-thread race (docs/executor.md, Limits): `JOINTFX_GLOO_THREADS=2` in the
environment runs PyTorch's default of two worker threads per gloo group instead of jointfx's one,
for the before/after comparison.

    .venv/bin/python bench/stress_torchtitan.py --runs 200 [--pipelines jointfx,jointfx_auto]
        [--steps 3] [--out /tmp/tt-stress]

Prints one line per failure (with its log's path) and a summary table; exit 1 if any run failed.
Results and the commit measured go in bench/README.md. Needs scripts/build and torchtitan.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from torchtitan_trainer import _port, trainer_env  # this folder: the same trainer runs

HEAP_TEXT = ("malloc(): ", "double free", "free(): ", "corrupted", "tcache", "Segmentation fault",
             "Fatal Python error")


def run_once(pipeline: str, steps: int, assets: Path, rec: Path, env: dict[str, str],
             timeout_s: int) -> tuple[str, float]:
    """One trainer run; ("ok" | "heap" | "signal N" | "exit N" | "timeout", seconds)."""
    rec.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(_port()),
           "-m", "jointfx.torchtitan", "--module", "graph_trainer.llama3",
           "--config", "graph_trainer_llama3_debugmodel_sdpa",
           "--compile.pass_pipeline", pipeline,
           "--hf_assets_path", str(assets / "tokenizer"),
           "--dataloader.dataset_path", str(assets / "data"),
           "--training.steps", str(steps), "--training.seq_len", "128",
           "--training.local_batch_size", "2", "--debug.seed", "42",
           "--dump_folder", str(rec / "dump")]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, env=env, cwd=rec, capture_output=True, text=True,
                           timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        (rec / "log.txt").write_text(f"{e.stdout or ''}{e.stderr or ''}")
        return "timeout", time.monotonic() - t0
    seconds = time.monotonic() - t0
    log = r.stdout + r.stderr
    if r.returncode == 0:
        return "ok", seconds
    (rec / "log.txt").write_text(log)
    if any(t in log for t in HEAP_TEXT):
        return "heap", seconds
    return (f"signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"), seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--pipelines", default="jointfx,jointfx_auto")
    p.add_argument("--out", default="/tmp/tt-stress")
    p.add_argument("--timeout-s", type=int, default=600)
    a = p.parse_args()
    out = Path(a.out)
    env = trainer_env()
    subprocess.run([sys.executable, "-m", "jointfx.torchtitan.toy_data", str(out / "assets")],
                   env=env, check=True, capture_output=True)
    threads = os.environ.get("JOINTFX_GLOO_THREADS", "1")
    summary = []
    for pipeline in a.pipelines.split(","):
        failures: dict[str, int] = {}
        times = []
        for k in range(a.runs):
            rec = out / pipeline / f"run{k}"
            what, seconds = run_once(pipeline, a.steps, out / "assets", rec, env, a.timeout_s)
            times.append(seconds)
            if what != "ok":
                failures[what] = failures.get(what, 0) + 1
                print(f"{pipeline} run {k}: {what} ({rec / 'log.txt'})", flush=True)
        times.sort()
        summary.append((pipeline, a.runs, sum(failures.values()), failures,
                        times[len(times) // 2]))
    print(f"\ngloo worker threads per group: {threads}; {a.steps} steps per run, 2 ranks\n")
    print("| pipeline | runs | failed | how | median s/run |")
    print("|---|---|---|---|---|")
    for pipeline, runs, failed, how, median in summary:
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(how.items())) or "-"
        print(f"| {pipeline} | {runs} | {failed} | {kinds} | {median:.1f} |")
    return 1 if any(s[2] for s in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
