"""A tiny recurrent language model: embedding, a stacked nn.LSTM, a linear head.

FQNs: embed (an Embedding with a padding row, 0), rnn.weight_ih_lN / weight_hh_lN / bias_ih_lN /
bias_hh_lN for each of the LSTM's layers (the layer index is a name suffix, not a module path:
no repeated blocks), head. Dropout between the LSTM's layers in training mode. Input: token ids
[batch, seq]; the loss is next-token cross-entropy. On CPU the traced graph runs each LSTM layer
as aten.mkldnn_rnn_layer, whose workspace output (read by mkldnn_rnn_layer_backward) the meta
kernel gives as an empty tensor and the real kernel fills only with grad mode on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class LstmConfig:
    vocab_size: int = 32
    dim: int = 12
    hidden: int = 16
    num_layers: int = 2
    dropout: float = 0.1

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class LstmLM(nn.Module):
    def __init__(self, cfg: LstmConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=0)
        self.rnn = nn.LSTM(cfg.dim, cfg.hidden, num_layers=cfg.num_layers, batch_first=True,
                           dropout=cfg.dropout)
        self.head = nn.Linear(cfg.hidden, cfg.vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(input_ids))
        return self.head(out)


def init_lstm(model: LstmLM, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        model.embed.weight[0].zero_()  # the padding row
