#!/usr/bin/env python3
"""Regenerates the traced joint-graph fixtures tests/data/traced/<variant>_w<world>.json.

Every variant of jointfx.trace at world sizes 1, 2 and 4, 2-layer tiny Llama: fsdp_tp at 2 (a
2 x 1 mesh: TP groups of one rank) and 4 (a 2 x 2 mesh), padding and tied at 2 and 4 (world 1
pads nothing; tied is there for dedup-fsdp-unshard). Traced on a fake process group as rank 0. Output is deterministic: running this twice
gives byte-identical files (tests/python/test_fixtures.py checks it).

    python scripts/gen_fixtures.py [--out DIR] [--only fsdp_w2 ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

# (variant, world size) pairs: the numerics parity matrix runs every one at its world size.
FIXTURES: tuple[tuple[str, int], ...] = (
    ("fsdp", 1), ("fsdp", 2), ("fsdp", 4),
    ("fsdp_tp", 2), ("fsdp_tp", 4),
    ("sac", 1), ("sac", 2), ("sac", 4),
    ("bf16", 1), ("bf16", 2), ("bf16", 4),
    ("padding", 2), ("padding", 4),
    ("tied", 2), ("tied", 4),
)


def fixture_name(variant: str, world: int) -> str:
    return f"{variant}_w{world}"


def generate(out_dir: Path, only: set[str] | None = None) -> list[Path]:
    # Imported here so --help works without torch.
    import torch

    from jointfx.export import write_graph
    from jointfx.trace import trace_variant

    torch.manual_seed(0)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for variant, world in FIXTURES:
        name = fixture_name(variant, world)
        if only and name not in only:
            continue
        doc = trace_variant(variant, world).export(include_stack_trace=False)
        path = out_dir / f"{name}.json"
        write_graph(doc, path)
        written.append(path)
        print(f"{path}: {len(doc['nodes'])} nodes, {path.stat().st_size} bytes")
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "traced",
                        help="output directory (default: tests/data/traced)")
    parser.add_argument("--only", nargs="*", default=None,
                        help="fixture names to regenerate, e.g. fsdp_w2")
    args = parser.parse_args()
    # Tracing is single-threaded work; extra intra-op threads only add noise on small machines.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    generate(args.out, set(args.only) if args.only else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
