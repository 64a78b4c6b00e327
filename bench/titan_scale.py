#!/usr/bin/env python3
"""Real-scale GraphTrainer graphs: GraphTrainer's own plan against FSDP2's and jointfx's.

For each preset of jointfx.titan_scale (torchtitan 0.3.0's shipped 8B, 70B, 70B TP 8 x FSDP 8,
DeepSeek-V3 16B and Qwen3 14B configs at full size, traced on the fake process group), this
traces the graph jointfx receives and GraphTrainer's own plan of it (`python -m
jointfx.titan_scale`), then runs `jointfx verify` on both, `opt -p default`, `opt -p auto` (its
70 GiB limit unless --memory-limit), and `analyze --hardware h100 --json` on every graph, and
prints one markdown table: simulated step and estimated peak of GraphTrainer's plan, FSDP2's
reference plan, jointfx's default and auto plans, auto with GraphTrainer's peak as its limit,
and each plan's collectives (count per kind).

    .venv/bin/python bench/titan_scale.py [--presets llama3_8b_w8 ...] [--layers N]
                                          [--work DIR] [--out bench/results/titan_scale.md]

Full size takes minutes per preset and several GiB of RAM (the 70B graph has about 25,000
nodes); --layers 2 is what tests/data/scale holds. Results: bench/README.md, "Real-scale graphs".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
JFX = REPO / "build" / "tools" / "jointfx"
KINDS = (("all_gather", "AG"), ("reduce_scatter", "RS"), ("all_reduce", "AR"),
         ("all_to_all", "A2A"))


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def trace(preset: str, layers: int | None, work: Path, reuse: bool) -> tuple[Path, Path, str]:
    src, gt = work / f"{preset}.json", work / f"{preset}.graph_trainer.json"
    if reuse and src.is_file() and gt.is_file():
        return src, gt, "reused"
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'python'}:{REPO / 'build' / 'python'}")
    cmd = [sys.executable, "-m", "jointfx.titan_scale", "--preset", preset, "--out", str(src),
           "--graph-trainer-out", str(gt)] + (["--layers", str(layers)] if layers else [])
    r = run(cmd, env=env)
    if r.returncode:
        raise SystemExit(f"{preset}: tracing failed:\n{r.stderr[-3000:]}")
    return src, gt, r.stdout.strip().splitlines()[-1]


def analyze(path: Path) -> dict[str, Any]:
    r = run([str(JFX), "analyze", str(path), "--hardware", "h100", "--json"])
    if r.returncode:
        raise SystemExit(f"analyze {path}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def collectives(path: Path) -> str:
    r = run([str(JFX), "stats", str(path), "--json"])
    by_kind = json.loads(r.stdout)["collectives"]["by_kind"]
    return " ".join(f"{short} {by_kind[k]}" for k, short in KINDS if by_kind.get(k))


def plan(src: Path, pipeline: str, limit: str | None, tag: str = "") -> tuple[Path | None, str]:
    out = src.with_suffix(f".{pipeline}{tag}.json")
    cmd = [str(JFX), "opt", str(src), "-o", str(out), "-p", pipeline]
    if limit and pipeline == "auto":
        cmd += ["--set", f"memory-limit={limit}"]
    r = run(cmd)
    if r.returncode:
        return None, r.stderr.strip().splitlines()[-1]
    return out, ""


def cell(sim: dict[str, Any]) -> str:
    return f"{sim['step_s'] * 1e3:.1f} ms, {sim['peak_memory_bytes'] / 2**30:.2f} GiB"


def row(preset: str, layers: int | None, work: Path, limit: str | None,
        reuse: bool) -> list[str]:
    src, gt, _ = trace(preset, layers, work, reuse)
    errors = [f"{p.name}: {run([str(JFX), 'verify', str(p)]).stdout.strip()}"
              for p in (src, gt) if run([str(JFX), "verify", str(p)]).returncode]
    ref = analyze(src)["reference_plan"]
    anchor = analyze(gt)["simulation"]
    cells = {"graph_trainer": (cell(anchor), collectives(gt)),
             "fsdp2": (cell(ref), f"AG {ref['all_gathers_forward'] + ref['all_gathers_backward']}"
                       f" RS {ref['reduce_scatters']}")}
    for pipeline in ("default", "auto"):
        out, err = plan(src, pipeline, limit)
        cells[pipeline] = ((cell(analyze(out)["simulation"]), collectives(out)) if out
                           else (f"error: {err}", ""))
    # auto given GraphTrainer's own peak: what it does with the same memory.
    out, err = plan(src, "auto", str(anchor["peak_memory_bytes"]), ".at_graph_trainer_peak")
    cells["auto_same_peak"] = ((cell(analyze(out)["simulation"]), collectives(out)) if out
                               else (f"error: {err}", ""))
    doc = json.loads(src.read_text())
    nodes, layers = len(doc["nodes"]), doc["meta"]["model"]["layers"]
    return [preset, str(layers), str(nodes), "; ".join(errors) or "clean",
            *(f"{c[0]} ({c[1]})" if c[1] else c[0] for c in cells.values())]


def main() -> int:
    from jointfx.titan_scale import PRESETS

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", nargs="*", default=list(PRESETS))
    p.add_argument("--layers", type=int, help="first N transformer blocks (default: all)")
    p.add_argument("--memory-limit", help="auto's limit (default: auto.json's, 70GiB)")
    p.add_argument("--work", type=Path, help="keep the graphs here (default: a temporary folder)")
    p.add_argument("--out", type=Path, help="also write the table to this file")
    p.add_argument("--reuse", action="store_true",
                   help="plan the graphs already in --work instead of tracing them again")
    a = p.parse_args()
    header = ["preset", "layers", "nodes", "verify", "GraphTrainer's passes",
              "FSDP2 reference plan", "jointfx -p default", "jointfx -p auto",
              "jointfx -p auto at GraphTrainer's peak"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for preset in a.presets:
            lines.append("| " + " | ".join(row(preset, a.layers, work, a.memory_limit, a.reuse))
                         + " |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        from jointfx._files import write_output

        write_output(a.out, text.encode(), SystemExit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
