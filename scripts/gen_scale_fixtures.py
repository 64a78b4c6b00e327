#!/usr/bin/env python3
"""Regenerates tests/data/scale/: torchtitan's shipped GraphTrainer configs at full width, 2 layers.

For each preset of jointfx.titan_scale (PRESETS: Llama-3 8B at world 8, 70B at world 64, 70B TP 8
x FSDP 8, DeepSeek-V3 16B with EP 1 and 8, Qwen3 14B), the first SCALE_LAYERS transformer
blocks at the config's own dimensions, sequence length and dtype, traced on the meta device and
the fake process group by GraphTrainer's own tracer, written twice:

    <preset>_l2.json                 what jointfx receives (GraphTrainer's cleanup and memory
                                     policy applied)
    <preset>_l2.graph_trainer.json   GraphTrainer's own plan of it (its pass list up to Inductor)

The graphs hold meta tensors: they are for the passes, analyze and the simulator, not for the
executor. Deterministic: running this twice gives byte-identical files
(tests/python/test_titan_scale.py checks one).

    python scripts/gen_scale_fixtures.py [--out DIR] [--only llama3_8b_w8 ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

SCALE_LAYERS = 2


def fixture_paths(out_dir: Path, preset: str) -> tuple[Path, Path]:
    stem = f"{preset}_l{SCALE_LAYERS}"
    return out_dir / f"{stem}.json", out_dir / f"{stem}.graph_trainer.json"


def generate(out_dir: Path, only: set[str] | None = None) -> list[Path]:
    import torch.distributed as dist

    from jointfx.export import write_graph
    from jointfx.titan_scale import PRESETS, trace_preset

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for preset in PRESETS:
        if only and preset not in only:
            continue
        tr = trace_preset(preset, layers=SCALE_LAYERS)
        src, gt = fixture_paths(out_dir, preset)
        for path, gm, plan in ((src, tr.jointfx_input(), "graph_trainer memory policy"),
                               (gt, tr.graph_trainer_plan(), "graph_trainer passes")):
            doc = tr.export(gm, plan)
            write_graph(doc, path)
            written.append(path)
            print(f"{path}: {len(doc['nodes'])} nodes, {path.stat().st_size} bytes")
    if dist.is_initialized():
        dist.destroy_process_group()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "scale",
                        help="output directory (default: tests/data/scale)")
    parser.add_argument("--only", nargs="*", default=None, help="preset names")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    generate(args.out, set(args.only) if args.only else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
