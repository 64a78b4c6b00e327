"""A tiny conv + BatchNorm image classifier with nested stages (a ResNet in miniature).

FQNs: stem.conv / stem.bn (then a 3x3 max pool), stages.M.blocks.N.conv / .bn (residual
conv3x3 -> BN -> ReLU blocks; the first block of a stage after the first one doubles the
channels and halves the resolution with a 1x1 shortcut, stages.M.blocks.0.shortcut), head
(a Linear after global average pooling). Input: float images [batch, 3, H, W]; the loss is
cross-entropy on class labels. BatchNorm in training mode normalizes with batch statistics and
updates its running_mean / running_var / num_batches_tracked buffers in place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ConvBNConfig:
    in_channels: int = 3
    channels: tuple[int, ...] = (4, 8)
    blocks_per_stage: int = 2
    num_classes: int = 6
    image_size: int = 8

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["channels"] = list(self.channels)
        return out


class ConvBN(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.shortcut = (nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
                         if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x if self.shortcut is None else self.shortcut(x)
        return F.relu(self.bn(self.conv(x)) + residual)


class Stage(nn.Module):
    def __init__(self, cin: int, cout: int, n_blocks: int, stride: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            Block(cin if i == 0 else cout, cout, stride if i == 0 else 1) for i in range(n_blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class ConvBNNet(nn.Module):
    def __init__(self, cfg: ConvBNConfig) -> None:
        super().__init__()
        self.config = cfg
        self.stem = ConvBN(cfg.in_channels, cfg.channels[0], 3)
        stages = []
        cin = cfg.channels[0]
        for i, cout in enumerate(cfg.channels):
            stages.append(Stage(cin, cout, cfg.blocks_per_stage, 1 if i == 0 else 2))
            cin = cout
        self.stages = nn.ModuleList(stages)
        self.head = nn.Linear(cin, cfg.num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.stem(images)), 3, stride=1, padding=1)
        for stage in self.stages:
            x = stage(x)
        return self.head(x.mean(dim=(2, 3)))


def init_convbn(model: ConvBNNet, seed: int = 0) -> None:
    """Seeded Kaiming-style conv weights, PyTorch's BatchNorm init (weight 1, bias 0; buffers
    as constructed: running_mean 0, running_var 1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".bn." in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / fan_in) ** 0.5)


def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels)
