#!/usr/bin/env python3
"""`jointfx exec` against PyTorch running the same graph as a GraphModule, bit for bit.

    check_graphmodule.py JOINTFX tests/data/traced/<variant>_w<N>.json [--steps S]

Both run the fixture unchanged on N gloo ranks with the same full parameters and batch
(jointfx.reference.write_fixture_data), the executor sharding the parameters itself and PyTorch
sharding them with the tracer's shard_param, one intra-op thread per rank, no optimizer, S steps
(default 2: the second step shows that neither side keeps state between calls). Every rank's
loss and every gradient shard of every step must be byte-identical. Needs torch and safetensors
(the repo's .venv); exits 77 (ctest: skipped) without them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
SKIP = 77


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("jointfx")
    p.add_argument("fixture", type=Path)
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()
    try:
        import torch
        from safetensors.torch import load_file

        from jointfx import reference
    except ImportError as e:
        print(f"skipped: {e}")
        return SKIP

    def tensor_bytes(t: torch.Tensor) -> bytes:
        return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()

    world = int(a.fixture.stem.rsplit("_w", 1)[1])
    with tempfile.TemporaryDirectory(prefix="jfx-gm-") as tmp:
        try:
            params, batch = reference.write_fixture_data(a.fixture, tmp)
        except ImportError as e:  # a fixture whose model needs what is not installed (torchtitan)
            print(f"skipped: {e}")
            return SKIP
        cmd = [a.jointfx, "exec", str(a.fixture), "--nproc", str(world), "--steps", str(a.steps),
               "--optimizer", "none", "--threads", "1", "--params", str(params), "--batch",
               str(batch), "--save-grads", f"{tmp}/exec", "--timeout-s", "120", "--quiet"]
        print("$ " + " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        print(r.stdout + r.stderr, end="")
        if r.returncode != 0:
            print(f"FAILED: jointfx exec exited with {r.returncode}")
            return 1
        reference.run(a.fixture, nproc=world, params=params, batch=batch, steps=a.steps,
                      save_grads=f"{tmp}/torch", threads=1)

        failures, compared = [], 0
        for step in range(1, a.steps + 1):
            for rank in range(world):
                name = f"grads.step{step}.rank{rank}.safetensors"
                ours, theirs = load_file(f"{tmp}/exec/{name}"), load_file(f"{tmp}/torch/{name}")
                if sorted(ours) != sorted(theirs):
                    failures.append(f"{name}: tensors {sorted(ours)} vs {sorted(theirs)}")
                    continue
                for key in sorted(ours):
                    x, y = ours[key], theirs[key]
                    compared += 1
                    if x.dtype != y.dtype or x.shape != y.shape:
                        failures.append(f"step {step} rank {rank} {key}: {x.dtype}{list(x.shape)}"
                                        f" vs {y.dtype}{list(y.shape)}")
                    elif tensor_bytes(x) != tensor_bytes(y):
                        diff = (x.double() - y.double()).abs().max().item()
                        failures.append(f"step {step} rank {rank} {key}: differs, max |a-b| "
                                        f"{diff:.3g}")
    for f in failures[:50]:
        print("FAILED: " + f)
    if failures:
        print(f"FAILED: {len(failures)} of {compared} tensors differ")
        return 1
    print(f"ok: {a.fixture.name}: jointfx exec and the PyTorch GraphModule agree bitwise on "
          f"{compared} tensors (loss and gradient shards, {world} rank{'s' * (world > 1)}, "
          f"{a.steps} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
