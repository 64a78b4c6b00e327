"""Seeded initialization shared by the model families that need nothing of their own."""

from __future__ import annotations

import torch
from torch import nn


def init_normal(model: nn.Module, seed: int, norm_prefixes: tuple[str, ...]) -> None:
    """0.02 * randn for matrices and tokens, weight 1 for norms (modules whose name starts with
    one of `norm_prefixes`), 0 for biases; one generator seeded `seed`, parameters in order."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            module = name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
            if module.startswith(norm_prefixes) and name.endswith("weight"):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
