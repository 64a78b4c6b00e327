#!/usr/bin/env python3
"""Regenerates tests/data/buffers/convbn_w1.json: the conv + BatchNorm model family
(jointfx.models "convbn") traced by jointfx.trace at world size 1, on a fake process group.

The world-2 trace is tests/data/traced/convbn_w2.json (scripts/gen_fixtures.py); this one adds
world 1 for the buffer-update tests. The graph updates BatchNorm's running_mean, running_var and
num_batches_tracked in place (native_batch_norm / add_ on buffer placeholders) and records the
buffers' init in meta.buffer_init. Deterministic: running this twice gives byte-identical files
(tests/python/test_buffers.py checks it).

    python scripts/gen_buffer_fixtures.py [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

FIXTURES = (("convbn", 1),)


def generate(out_dir: Path) -> list[Path]:
    import torch
    import torch.distributed as dist

    from jointfx.export import write_graph
    from jointfx.models import trace_case

    torch.manual_seed(0)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for case, world in FIXTURES:
        doc = trace_case(case, world).export(include_stack_trace=False)
        path = out_dir / f"{case}_w{world}.json"
        write_graph(doc, path)
        written.append(path)
        print(f"{path}: {len(doc['nodes'])} nodes, {path.stat().st_size} bytes")
    if dist.is_initialized():
        dist.destroy_process_group()
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "buffers",
                        help="output directory (default: tests/data/buffers)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
