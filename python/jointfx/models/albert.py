"""A tiny ALBERT-style encoder: one transformer layer shared by every layer position.

FQNs as in transformers' AlbertForSequenceClassification, with the layer group flattened into one
module: embeddings.word_embeddings / position_embeddings / token_type_embeddings / LayerNorm
(embedding width 8, factorized), encoder.embedding_hidden_mapping_in (8 -> 16),
encoder.shared_layer.attention.query / key / value / dense / LayerNorm, encoder.shared_layer.ffn /
ffn_output / full_layer_layer_norm, pooler, classifier. `encoder.shared_layer` is ONE module
called num_hidden_layers times in forward, so its FQNs carry no layer index, each of its
parameters is read (and, under FSDP, all-gathered) once per call, and its gradient is the sum of
the calls' gradients. Inputs: token ids and an attention mask (int64); cross-entropy on labels.
No dropout.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class AlbertConfig:
    vocab_size: int = 40
    embedding_size: int = 8
    hidden_size: int = 16
    num_hidden_layers: int = 3  # calls of the one shared layer
    num_attention_heads: int = 2
    intermediate_size: int = 32
    max_position_embeddings: int = 16
    type_vocab_size: int = 2
    num_labels: int = 4
    layer_norm_eps: float = 1e-12

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class AlbertEmbeddings(nn.Module):
    def __init__(self, cfg: AlbertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.embedding_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.embedding_size)
        self.LayerNorm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        token_types = torch.zeros_like(input_ids)
        h = (self.word_embeddings(input_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_types))
        return self.LayerNorm(h)


class AlbertAttention(nn.Module):
    def __init__(self, cfg: AlbertConfig) -> None:
        super().__init__()
        self.n_head = cfg.num_attention_heads
        self.head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (proj(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
                   for proj in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + mask_bias
        ctx = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        return self.LayerNorm(x + self.dense(ctx))


class AlbertLayer(nn.Module):
    def __init__(self, cfg: AlbertConfig) -> None:
        super().__init__()
        self.attention = AlbertAttention(cfg)
        self.ffn = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.ffn_output = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.full_layer_layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        h = self.attention(x, mask_bias)
        return self.full_layer_layer_norm(h + self.ffn_output(F.gelu(self.ffn(h))))


class AlbertTransformer(nn.Module):
    def __init__(self, cfg: AlbertConfig) -> None:
        super().__init__()
        self.num_hidden_layers = cfg.num_hidden_layers
        self.embedding_hidden_mapping_in = nn.Linear(cfg.embedding_size, cfg.hidden_size)
        self.shared_layer = AlbertLayer(cfg)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.embedding_hidden_mapping_in(x)
        for _ in range(self.num_hidden_layers):  # the same parameters at every depth
            x = self.shared_layer(x, mask_bias)
        return x


class AlbertForSequenceClassification(nn.Module):
    def __init__(self, cfg: AlbertConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embeddings = AlbertEmbeddings(cfg)
        self.encoder = AlbertTransformer(cfg)
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask_bias = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
        h = self.encoder(self.embeddings(input_ids), mask_bias)
        return self.classifier(torch.tanh(self.pooler(h[:, 0])))


def init_albert(model: AlbertForSequenceClassification, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
