"""A tiny MLP classifier whose every dimension is odd, for FSDP shards of unequal real size.

FQNs: embed (a Linear 10 -> 7), layers.N.fc (7 -> 7, with bias), layers.N.norm (LayerNorm 7),
head (7 -> 3). At world 4, dim 0 of every parameter is 7 or 3: shards get ceil(rows / 4) rows
and the last rank's shard is partly (7 rows: 1 of 2) or wholly (3 rows: its 1 row) padding.
Input: float features [batch, 10]; the loss is cross-entropy on class labels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class UnevenConfig:
    in_features: int = 10
    hidden: int = 7
    num_layers: int = 2
    num_classes: int = 3

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Layer(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.norm(self.fc(x)))


class UnevenMLP(nn.Module):
    def __init__(self, cfg: UnevenConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed = nn.Linear(cfg.in_features, cfg.hidden)
        self.layers = nn.ModuleList(Layer(cfg.hidden) for _ in range(cfg.num_layers))
        self.head = nn.Linear(cfg.hidden, cfg.num_classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.embed(features)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def init_mlp(model: nn.Module, seed: int = 0) -> None:
    """Seeded weights for the MLP cases (this one and jointfx.models.sequential): LayerNorms at
    identity, every other parameter N(0, 0.3^2), drawn in parameter order."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".norm." in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
