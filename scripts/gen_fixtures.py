#!/usr/bin/env python3
"""Regenerates the traced joint-graph fixtures tests/data/traced/<variant>_w<world>.json.

Every tiny-Llama variant (jointfx.trace.variant_config) at world sizes 1, 2 and 4, 2 layers:
fsdp_tp at 2 (a 2 x 1 mesh: TP groups of one rank) and 4 (a 2 x 2 mesh), padding and tied at 2
and 4 (world 1 pads nothing; tied is there for dedup-fsdp-unshard). Then the other model families
(jointfx.models.MODEL_FIXTURES: gpt2, encoder, convbn, moe, vit, uneven, uneven_bf16, t5, albert,
lstm, sequential, tvvit, mixer), traced with
jointfx.trace. Then models of real model libraries (jointfx.models.real.REAL_FIXTURES: hf_llama,
hf_t5, hf_qwen3_moe, hf_whisper, hf_lora_llama from Hugging Face transformers, timm_vit, timm_convnext, timm_resnet18 from
timm; tiny configs, seeded random weights, nothing downloaded), traced with jointfx.trace, the
Hugging Face ones called by keyword. Then graph_trainer model families traced by torchtitan's own
tracer (jointfx.titan, TITAN_FIXTURES: titan_qwen3_w2, qwen3's debugmodel with 2 layers;
titan_llama3_hsdp_w4, llama3's under HSDP, 2 replicas of 2 shards). All
traced on a fake process group as rank 0. Output is deterministic: running this twice gives byte-identical
files (tests/python/test_fixtures.py checks it).

    python scripts/gen_fixtures.py [--out DIR] [--only fsdp_w2 ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

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


# (graph_trainer model family, world size, replicas): jointfx.titan.trace_model(family, 2 layers,
# replicas=...), saved as titan_<family>_w<world>, or titan_<family>_hsdp_w<world> with replicas
# (HSDP: each gradient all-reduced across replicas, then reduce-scattered). deepseek_v3 is not
# among them: its MoE routing calls a Python-only custom op that the C++ executor cannot run,
# and every fixture runs in the parity matrix.
TITAN_FIXTURES: tuple[tuple[str, int, int], ...] = (("qwen3", 2, 1), ("llama3", 4, 2))
TITAN_LAYERS = 2


def fixture_name(variant: str, world: int) -> str:
    return f"{variant}_w{world}"


def model_fixtures() -> tuple[tuple[str, int], ...]:
    """(case, world size) of the non-Llama families (jointfx.models.MODEL_FIXTURES)."""
    from jointfx.models import MODEL_FIXTURES

    return MODEL_FIXTURES


def real_fixtures() -> tuple[tuple[str, int], ...]:
    """(case, world size) of the real model libraries' models (jointfx.models.real)."""
    from jointfx.models.real import REAL_FIXTURES

    return REAL_FIXTURES


def all_fixture_names() -> list[str]:
    return [fixture_name(v, w) for v, w in (*FIXTURES, *model_fixtures(), *real_fixtures())] + [
        titan_fixture_name(f, w, r) for f, w, r in TITAN_FIXTURES]


def titan_fixture_name(family: str, world: int, replicas: int = 1) -> str:
    return f"titan_{family}_w{world}" if replicas == 1 else f"titan_{family}_hsdp_w{world}"


def generate(out_dir: Path, only: set[str] | None = None) -> list[Path]:
    # Imported here so --help works without torch.
    import torch

    from jointfx.export import write_graph
    from jointfx.models import trace_case
    from jointfx.models.real import trace_real_case
    from jointfx.trace import init_fake_world, trace_variant

    torch.manual_seed(0)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    jobs = ([(fixture_name(v, w), partial(trace_variant, v, w)) for v, w in FIXTURES]
            + [(fixture_name(c, w), partial(_trace_model, init_fake_world, trace_case, c, w))
               for c, w in model_fixtures()]
            + [(fixture_name(c, w), partial(_trace_model, init_fake_world, trace_real_case, c, w))
               for c, w in real_fixtures()]
            + [(titan_fixture_name(f, w, r), partial(_trace_titan, f, w, r))
               for f, w, r in TITAN_FIXTURES])
    for name, run in jobs:
        if only and name not in only:
            continue
        doc = run().export(include_stack_trace=False)
        path = out_dir / f"{name}.json"
        write_graph(doc, path)
        written.append(path)
        print(f"{path}: {len(doc['nodes'])} nodes, {path.stat().st_size} bytes")
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return written


def _trace_titan(family: str, world: int, replicas: int) -> Any:
    from jointfx import titan

    titan.init_fake_world(world)
    return titan.trace_model(family, TITAN_LAYERS, replicas=replicas)


def _trace_model(init_fake_world: Any, trace_case: Any, case: str, world: int) -> Any:
    init_fake_world(world)
    return trace_case(case)


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
