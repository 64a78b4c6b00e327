#!/usr/bin/env python3
"""Numerics of `jointfx exec` on a traced fixture against PyTorch eager.

    check_fixture.py JOINTFX tests/data/traced/<variant>_w<N>.json

Needs torch and safetensors (the repo's .venv) and python/ on the path; exits 77 (ctest: skipped)
without them. Rebuilds the tiny Llama the fixture was traced from (variant and world size from
the file name) with jointfx.model's seeded init, writes its full parameters and buffers and one
batch (the same on every rank) as safetensors, runs the graph on N gloo ranks for one step
(--optimizer none), and compares every rank's loss and gradient shards with eager autograd on
the full, unsharded model. Every rank sees the same batch, so each reduce-scattered gradient is
fsdp_size x the eager gradient, TP-sliced and FSDP-sharded with zero padding (trace.shard_param).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
SKIP = 77


def main() -> int:
    jointfx, fixture = sys.argv[1], Path(sys.argv[2])
    try:
        import torch
        from safetensors.torch import load_file, save_file

        from jointfx import trace
        from jointfx.model import cross_entropy_loss
    except ImportError as e:
        print(f"skipped: {e}")
        return SKIP
    m = re.fullmatch(r"(\w+)_w(\d+)", fixture.stem)
    if not m or m.group(1) not in trace.VARIANTS:
        print(f"skipped: {fixture.name} is not <variant>_w<N>")
        return SKIP
    variant, world = m.group(1), int(m.group(2))
    cfg = trace.variant_config(variant, world)
    tp = max(cfg.tp_size, 1)
    fsdp = world // tp
    full_cfg = replace(cfg, model=replace(cfg.model, tp_size=1))
    model = trace.build_model(full_cfg, seed=0)
    layouts = trace.param_layouts(trace.build_model(cfg, seed=0), fsdp, tp)

    gen = torch.Generator().manual_seed(1)
    shape = (cfg.batch_size, cfg.seq_len)
    tokens = torch.randint(0, cfg.model.vocab_size, shape, generator=gen)
    labels = torch.randint(0, cfg.model.vocab_size, shape, generator=gen)

    # Eager reference on the full model. Mixed precision: the graph computes in param_dtype.
    params = dict(model.named_parameters())
    if cfg.param_dtype is not None:
        model = model.to(cfg.param_dtype)
        params = dict(model.named_parameters())
    loss = cross_entropy_loss(model(tokens), labels)
    grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
    tol = 1e-5 if cfg.param_dtype is None else 3e-2

    failures = []
    with tempfile.TemporaryDirectory(prefix="jfx-fixture-") as tmp:
        full = trace.build_model(full_cfg, seed=0)  # float32 weights: what the shards hold
        state = {k: v.detach().contiguous() for k, v in full.named_parameters()}
        state.update({k: v.detach().contiguous() for k, v in full.named_buffers()})
        save_file(state, f"{tmp}/params.safetensors")
        save_file({"tokens": tokens, "labels": labels}, f"{tmp}/batch.safetensors")
        cmd = [jointfx, "exec", str(fixture), "--nproc", str(world), "--steps", "1",
               "--optimizer", "none", "--params", f"{tmp}/params.safetensors",
               "--batch", f"{tmp}/batch.safetensors", "--save-grads", f"{tmp}/out",
               "--timeout-s", "120", "--quiet"]
        print("$ " + " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        print(r.stdout + r.stderr, end="")
        if r.returncode != 0:
            print(f"FAILED: exit code {r.returncode}")
            return 1
        for rank in range(world):
            got = load_file(f"{tmp}/out/grads.step1.rank{rank}.safetensors")
            ref_loss = loss.detach().float()
            if not torch.allclose(got["__loss__"].float(), ref_loss, rtol=tol, atol=0):
                failures.append(f"rank {rank}: loss {got['__loss__'].item()} vs eager "
                                f"{ref_loss.item()}")
            for lay in layouts:
                ref = trace.shard_param(grads[lay.fqn].detach().float() * fsdp, lay,
                                        fsdp_rank=rank // tp, fsdp_size=fsdp,
                                        tp_rank=rank % tp, tp_size=tp)
                g = got[lay.fqn].float()
                scale = max(ref.abs().max().item(), 1e-12)
                err = (g - ref).abs().max().item() / scale
                if g.shape != ref.shape or err > tol:
                    failures.append(f"rank {rank} {lay.fqn}: {tuple(g.shape)} vs "
                                    f"{tuple(ref.shape)}, max error {err:.3g} of max |grad|")
    for f in failures:
        print("FAILED: " + f)
    if not failures:
        print(f"ok: {fixture.name}: loss and {len(layouts)} gradient shards on {world} ranks "
              f"match eager (tolerance {tol:g})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
