"""The reference plan (FSDP2's: passes/plan/reference_plan.h, docs/passes.md "Reference plan")
beside the default and auto pipelines, per model family.

    python3 bench/reference_plan.py [--jointfx build/tools/jointfx] [--out bench/results]
                                    [--only NAME ...] [--no-measure]

Graphs: one traced fixture per model family (tests/data/traced/*_w2.json, world 2), and the
synthetic Llama 3 shapes of bench/planner.py (`jointfx synth --preset llama3-8b --world-size 8`,
`--preset llama3-70b --world-size 64`). Plans: the reference plan (`jointfx opt -p` with the
pipeline `jointfx analyze --json` names in reference_plan.pipeline), configs/pipelines/default.json,
and configs/pipelines/auto.json with `--set memory-limit=R`, R the reference plan's estimated peak
(the planner under FSDP2's memory).

Figures per plan: simulated step on configs/hardware/h100.json (`analyze --hardware`; the
fixtures at their world 2, the synthetic shapes at world 8 and 64), the estimated peak (NCCL),
the measured peak on CPU at world 2 (`jointfx exec --nproc 2 --steps 2 --threads 1 --optimizer
none`, the largest `peak_bytes` over ranks and steps, as bench/memory_model.py; fixtures only)
beside the estimate with gloo's own buffers (`analyze --comm-backend gloo`, what that run has),
and the all-gathers in forward.
Results: <out>/reference_plan.txt (the table) and reference_plan.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACED = REPO / "tests/data/traced"
DEFAULT = REPO / "configs/pipelines/default.json"
AUTO = REPO / "configs/pipelines/auto.json"
H100 = REPO / "configs/hardware/h100.json"
FAMILIES = ["fsdp_w2", "titan_qwen3_w2", "gpt2_w2", "encoder_w2", "albert_w2", "t5_w2", "moe_w2",
            "vit_w2", "tvvit_w2", "mixer_w2", "convbn_w2", "lstm_w2", "sequential_w2",
            # the model libraries' own classes (jointfx.models.real)
            "hf_llama_w2", "hf_qwen3_moe_w2", "hf_t5_w2", "timm_vit_w2", "timm_convnext_w2",
            "timm_resnet18_w2"]
SYNTH = [("llama3-8b", 8), ("llama3-70b", 64)]


def sh(cmd: list) -> str:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stderr[-4000:]}")
    return p.stdout


def analyze(jfx: str, graph: Path, reference: bool = False) -> dict:
    cmd = [jfx, "analyze", graph, "--json", "--hardware", H100, "--top", "0"]
    return json.loads(sh(cmd if reference else cmd + ["--no-reference"]))


def measure(jfx: str, graph: Path, work: Path) -> int:
    logs = work / "log"
    logs.mkdir(exist_ok=True)
    for f in logs.glob("*"):
        f.unlink()
    sh([jfx, "exec", graph, "--nproc", "2", "--steps", "2", "--threads", "1", "--optimizer",
        "none", "-q", "--progress", "never", "--timeout-s", "300", "--log",
        logs / "rank{rank}.jsonl"])
    return max(int(json.loads(x)["peak_bytes"]) for r in range(2)
               for x in (logs / f"rank{r}.jsonl").read_text().splitlines())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jointfx", default=str(REPO / "build/tools/jointfx"))
    ap.add_argument("--out", default=str(REPO / "bench/results"))
    ap.add_argument("--only", nargs="*", help="graph names (default: all)")
    ap.add_argument("--no-measure", action="store_true", help="skip the CPU runs")
    args = ap.parse_args()
    jfx = args.jointfx
    rows = []
    with tempfile.TemporaryDirectory(prefix="jfx-reference-plan-") as tmp:
        work = Path(tmp)
        graphs = [(n, TRACED / f"{n}.json", True) for n in FAMILIES]
        for preset, world in SYNTH:
            g = work / f"{preset}_w{world}.json"
            sh([jfx, "synth", "--preset", preset, "--world-size", world, "-o", g])
            graphs.append((f"{preset} w{world}", g, False))
        for name, graph, runnable in graphs:
            if args.only and name not in args.only:
                continue
            stem = name.replace(" ", "_")
            traced = work / f"{stem}.traced.json"
            sh([jfx, "opt", graph, "--no-verify", "-p", "dce", "-o", traced])
            ref_info = analyze(jfx, traced, reference=True)["reference_plan"]
            plans = {"reference": work / f"{stem}.reference.json",
                     "default": work / f"{stem}.default.json",
                     "auto": work / f"{stem}.auto.json"}
            sh([jfx, "opt", traced, "-p", ref_info["pipeline"], "-o", plans["reference"]])
            sh([jfx, "opt", traced, "-p", DEFAULT, "-o", plans["default"]])
            sh([jfx, "opt", traced, "-p", AUTO, "--set",
                f"memory-limit={ref_info['peak_memory_bytes']}", "-o", plans["auto"]])
            row = {"graph": name}
            for plan, g in plans.items():
                a = analyze(jfx, g)
                row[plan] = {"step_us": a["simulation"]["step_s"] * 1e6,
                             "estimated": a["memory"]["peak_bytes"],
                             "forward_all_gathers": a["fsdp"]["all_gathers_by_phase"]["forward"]}
                if runnable and not args.no_measure:
                    # The CPU run has gloo's own buffers: compare it with the estimate that
                    # counts them (bench/memory_model.py).
                    row[plan]["estimated_gloo"] = json.loads(sh(
                        [jfx, "analyze", g, "--json", "--no-reference", "--top", "0",
                         "--comm-backend", "gloo"]))["memory"]["peak_bytes"]
                    row[plan]["measured"] = measure(jfx, g, work)
            # analyze's own reference figures and the plan written by opt are the same plan.
            assert row["reference"]["estimated"] == ref_info["peak_memory_bytes"], name
            rows.append(row)
            print(name, json.dumps({p: row[p] for p in plans}), file=sys.stderr, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "reference_plan.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["| graph | step us: reference / default / auto | estimated peak B: ref / default / "
             "auto | measured peak B on CPU, world 2 (gloo estimate): ref / default / auto | "
             "forward all-gathers: "
             "ref / default / auto |", "|---|---|---|---|---|"]
    bad = []
    for r in rows:
        p = ("reference", "default", "auto")
        meas = (" / ".join(f"{r[x]['measured']} ({r[x]['estimated_gloo']})" for x in p)
                if "measured" in r["default"] else "-")
        lines.append(f"| {r['graph']} | " + " / ".join(f"{r[x]['step_us']:.1f}" for x in p) +
                     " | " + " / ".join(str(r[x]["estimated"]) for x in p) + f" | {meas} | " +
                     " / ".join(str(r[x]["forward_all_gathers"]) for x in p) + " |")
        if (r["default"]["step_us"] > r["reference"]["step_us"] + 1e-6 or
                r["default"]["estimated"] > r["reference"]["estimated"]):
            bad.append(r["graph"])
    lines.append("")
    lines.append("default slower or larger than the reference: " + (", ".join(bad) or "none"))
    (out / "reference_plan.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if bad:
        sys.exit(f"the default plan does not dominate the reference on: {bad}")


if __name__ == "__main__":
    main()
