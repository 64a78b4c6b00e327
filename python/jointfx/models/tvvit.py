"""A tiny Vision Transformer with torchvision's module names (torchvision.models.VisionTransformer).

FQNs: conv_proj (a strided Conv2d), class_token (a root parameter), encoder.pos_embedding,
encoder.layers.encoder_layer_N.{ln_1, self_attention (nn.MultiheadAttention), ln_2, mlp.0,
mlp.3} (mlp is torchvision's MLPBlock, an nn.Sequential of Linear, GELU, Dropout, Linear,
Dropout), encoder.ln, heads.head. What it exercises: blocks named `<stem>_<int>` rather than
`<container>.<int>` (the block analysis reads `encoder_layer_3` as index 3), an nn.Sequential of
single layers inside each block (mlp.0 and mlp.3 are parts of the layer's block, not blocks),
and a parameter of the encoder, not of the root, added to the activations. Written here from
torchvision's published layout (torchvision is not a dependency). Input: float images
[batch, 3, H, W]; the loss is cross-entropy on class labels.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from jointfx.models.seeded import init_normal


@dataclass(frozen=True)
class TvViTConfig:
    in_channels: int = 3
    image_size: int = 8
    patch_size: int = 4
    hidden_dim: int = 16
    num_layers: int = 2
    num_heads: int = 2
    mlp_dim: int = 32
    num_classes: int = 5

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class MLPBlock(nn.Sequential):
    def __init__(self, dim: int, mlp_dim: int) -> None:
        super().__init__(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(0.0),
                         nn.Linear(mlp_dim, dim), nn.Dropout(0.0))


class EncoderBlock(nn.Module):
    def __init__(self, cfg: TvViTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.hidden_dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(cfg.hidden_dim, cfg.num_heads, dropout=0.0,
                                                    batch_first=True)
        self.dropout = nn.Dropout(0.0)
        self.ln_2 = nn.LayerNorm(cfg.hidden_dim, eps=1e-6)
        self.mlp = MLPBlock(cfg.hidden_dim, cfg.mlp_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + self.dropout(y)
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    def __init__(self, cfg: TvViTConfig, seq_length: int) -> None:
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.zeros(1, seq_length, cfg.hidden_dim))
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(cfg)) for i in range(cfg.num_layers)))
        self.ln = nn.LayerNorm(cfg.hidden_dim, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class VisionTransformer(nn.Module):
    def __init__(self, cfg: TvViTConfig) -> None:
        super().__init__()
        self.conv_proj = nn.Conv2d(cfg.in_channels, cfg.hidden_dim, cfg.patch_size,
                                   cfg.patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, cfg.hidden_dim))
        self.encoder = Encoder(cfg, (cfg.image_size // cfg.patch_size) ** 2 + 1)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(cfg.hidden_dim, cfg.num_classes)))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


def init_tvvit(model: nn.Module, seed: int = 0) -> None:
    """Seeded weights: 0.02 * randn for matrices and tokens, LayerNorm weight 1, biases 0."""
    init_normal(model, seed, ("ln",))
