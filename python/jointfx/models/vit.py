"""A tiny Vision Transformer built from PyTorch's own layers (nn.TransformerEncoder).

FQNs: patch_embed (a strided Conv2d), cls_token and pos_embed (parameters of the root),
encoder.layers.N.{self_attn.in_proj_weight, self_attn.in_proj_bias, self_attn.out_proj,
linear1, linear2, norm1, norm2} (pre-norm nn.TransformerEncoderLayer, dropout 0), norm, head.
What it exercises: nn.MultiheadAttention reads `out_proj.weight` and `in_proj_weight` from its
own forward without calling `out_proj` (a parameter read outside its owner's call), fused
in-projection parameters, root-level parameters of shape [1, ...] (padded at every world size
above 1), a conv patch embedding and a class token. Input: float images [batch, 3, H, W]; the
loss is cross-entropy on class labels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ViTConfig:
    in_channels: int = 3
    image_size: int = 8
    patch_size: int = 4
    dim: int = 16
    depth: int = 2
    heads: int = 2
    mlp_ratio: int = 2
    num_classes: int = 5

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class ViT(nn.Module):
    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        patches = (cfg.image_size // cfg.patch_size) ** 2
        self.patch_embed = nn.Conv2d(cfg.in_channels, cfg.dim, cfg.patch_size, cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, patches + 1, cfg.dim))
        layer = nn.TransformerEncoderLayer(cfg.dim, cfg.heads, cfg.dim * cfg.mlp_ratio,
                                           dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, cfg.depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.encoder(x))[:, 0])


def init_vit(model: ViT, seed: int = 0) -> None:
    """Seeded weights: 0.02 * randn for matrices and tokens, LayerNorm weight 1, biases 0."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.rsplit(".", 1)[0].rsplit(".", 1)[-1] and name.endswith("weight"):
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)


def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels)
