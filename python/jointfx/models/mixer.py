"""A tiny MLP-Mixer whose channel MLPs run under selective activation checkpointing, Linear by Linear.

FQNs: stem (a Linear patch projection), layers.N.{norm1, token_mlp.0, token_mlp.2, norm2,
channel_mlp.0, channel_mlp.2} (each MLP an nn.Sequential of Linear, GELU, Linear), norm, head.
What it exercises: token mixing through transposes, with no attention; an nn.Sequential of
single layers inside each block (token_mlp.0 is part of block layers.N, not a block); SAC regions
that are modules owning their parameters (every channel_mlp Linear is checkpointed by itself,
`checkpoint_modules`), so the all-gathers run inside the regions and carry their tags. Input:
float patches [batch, tokens, patch_dim]; the loss is cross-entropy on class labels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from jointfx.models.seeded import init_normal


@dataclass(frozen=True)
class MixerConfig:
    patch_dim: int = 12
    tokens: int = 6
    dim: int = 16
    token_hidden: int = 12
    channel_hidden: int = 32
    depth: int = 2
    num_classes: int = 5

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _mlp(dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))


class MixerLayer(nn.Module):
    def __init__(self, cfg: MixerConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.token_mlp = _mlp(cfg.tokens, cfg.token_hidden)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.channel_mlp = _mlp(cfg.dim, cfg.channel_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self, cfg: MixerConfig) -> None:
        super().__init__()
        self.stem = nn.Linear(cfg.patch_dim, cfg.dim)
        self.layers = nn.ModuleList(MixerLayer(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.num_classes)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        x = self.stem(patches)
        for layer in self.layers:
            x = layer(x)
        return self.head(F.gelu(self.norm(x)).mean(dim=1))


def checkpointed_linears(model: nn.Module) -> list[nn.Module]:
    """The modules run under SAC: every Linear of every channel MLP, each its own region."""
    assert isinstance(model, Mixer)
    return [m for layer in model.layers for m in layer.channel_mlp if isinstance(m, nn.Linear)]


def init_mixer(model: nn.Module, seed: int = 0) -> None:
    """Seeded weights: 0.02 * randn for matrices and tokens, LayerNorm weight 1, biases 0."""
    init_normal(model, seed, ("norm",))
