"""A model that is an nn.Sequential: an input projection, residual MLP blocks, a head.

FQNs start with the index in the root Sequential: 0 (Linear 6 -> 8), 1..N (a residual block:
norm (LayerNorm 8), fc1 (8 -> 16), fc2 (16 -> 8)), N+1 (Linear 8 -> 4). No named container
holds the blocks: the root module does (`1.fc1.weight` is in block `1`). Input: float features
[batch, 6]; the loss is cross-entropy on class labels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class SequentialConfig:
    in_features: int = 6
    hidden: int = 8
    num_blocks: int = 3
    num_classes: int = 4

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class ResidualMLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def sequential_model(cfg: SequentialConfig) -> nn.Sequential:
    return nn.Sequential(nn.Linear(cfg.in_features, cfg.hidden),
                         *(ResidualMLP(cfg.hidden) for _ in range(cfg.num_blocks)),
                         nn.Linear(cfg.hidden, cfg.num_classes))

