"""A tiny T5-style encoder-decoder for sequence-to-sequence LM, with HuggingFace's module names.

FQNs as in transformers' T5ForConditionalGeneration: shared (the token embedding both stacks read
as embed_tokens), encoder.block.N.layer.0.SelfAttention.q / k / v / o and .layer_norm,
encoder.block.N.layer.1.DenseReluDense.wi / wo and .layer_norm, encoder.final_layer_norm;
decoder.block.N.layer.0.SelfAttention (causal), decoder.block.N.layer.1.EncDecAttention (keys and
values from the encoder's final output, read by every decoder block), decoder.block.N.layer.2
.DenseReluDense, decoder.final_layer_norm; lm_head (untied, as in T5 v1.1). Block 0 of each stack
owns the relative position bias (layer.0.SelfAttention.relative_attention_bias) that the later
blocks reuse, so the blocks of one stack do not hold the same parameters. RMS layer norms without
bias, no biases in the linears, no dropout. Inputs: encoder token ids and decoder token ids
(int64); the loss is cross-entropy of the decoder's logits against labels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class T5Config:
    vocab_size: int = 40
    d_model: int = 16
    d_kv: int = 8
    d_ff: int = 32
    num_heads: int = 2
    num_layers: int = 2          # encoder blocks
    num_decoder_layers: int = 2  # decoder blocks
    relative_attention_num_buckets: int = 8
    layer_norm_epsilon: float = 1e-6

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class T5LayerNorm(nn.Module):
    """RMS norm with a scale and no bias or mean subtraction (T5's)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class T5Attention(nn.Module):
    def __init__(self, cfg: T5Config, *, has_relative_bias: bool) -> None:
        super().__init__()
        self.n_heads, self.d_kv = cfg.num_heads, cfg.d_kv
        inner = cfg.num_heads * cfg.d_kv
        self.q = nn.Linear(cfg.d_model, inner, bias=False)
        self.k = nn.Linear(cfg.d_model, inner, bias=False)
        self.v = nn.Linear(cfg.d_model, inner, bias=False)
        self.o = nn.Linear(inner, cfg.d_model, bias=False)
        self.num_buckets = cfg.relative_attention_num_buckets
        if has_relative_bias:
            self.relative_attention_bias = nn.Embedding(self.num_buckets, cfg.num_heads)

    def position_bias(self, q_len: int, k_len: int, causal: bool) -> torch.Tensor:
        """[1, heads, q, k]: a learned bias per clamped relative distance (T5 buckets
        logarithmically; a clamp keeps the same shape of computation at these sizes), with the
        causal mask folded in for the decoder as HF does."""
        rel = torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]
        half = self.num_buckets // 2
        buckets = rel.clamp(-half, half - 1) + half
        bias = self.relative_attention_bias(buckets).permute(2, 0, 1).unsqueeze(0)
        if causal:
            bias = bias.masked_fill(rel > 0, torch.finfo(bias.dtype).min)
        return bias

    def forward(self, x: torch.Tensor, kv: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        b, t, _ = x.shape
        s = kv.shape[1]
        q = self.q(x).view(b, t, self.n_heads, self.d_kv).transpose(1, 2)
        k = self.k(kv).view(b, s, self.n_heads, self.d_kv).transpose(1, 2)
        v = self.v(kv).view(b, s, self.n_heads, self.d_kv).transpose(1, 2)
        scores = q @ k.transpose(-1, -2)  # T5 does not scale by 1/sqrt(d_kv)
        if bias is not None:
            scores = scores + bias
        out = F.softmax(scores, dim=-1) @ v
        return self.o(out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_kv))


class T5LayerSelfAttention(nn.Module):
    def __init__(self, cfg: T5Config, *, has_relative_bias: bool) -> None:
        super().__init__()
        self.SelfAttention = T5Attention(cfg, has_relative_bias=has_relative_bias)
        self.layer_norm = T5LayerNorm(cfg.d_model, cfg.layer_norm_epsilon)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        h = self.layer_norm(x)
        return x + self.SelfAttention(h, h, bias)


class T5LayerCrossAttention(nn.Module):
    def __init__(self, cfg: T5Config) -> None:
        super().__init__()
        self.EncDecAttention = T5Attention(cfg, has_relative_bias=False)
        self.layer_norm = T5LayerNorm(cfg.d_model, cfg.layer_norm_epsilon)

    def forward(self, x: torch.Tensor, encoder_out: torch.Tensor) -> torch.Tensor:
        return x + self.EncDecAttention(self.layer_norm(x), encoder_out, None)


class T5DenseReluDense(nn.Module):
    def __init__(self, cfg: T5Config) -> None:
        super().__init__()
        self.wi = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.wo = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wo(F.relu(self.wi(x)))


class T5LayerFF(nn.Module):
    def __init__(self, cfg: T5Config) -> None:
        super().__init__()
        self.DenseReluDense = T5DenseReluDense(cfg)
        self.layer_norm = T5LayerNorm(cfg.d_model, cfg.layer_norm_epsilon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.DenseReluDense(self.layer_norm(x))


class T5Block(nn.Module):
    def __init__(self, cfg: T5Config, *, is_decoder: bool, has_relative_bias: bool) -> None:
        super().__init__()
        self.is_decoder = is_decoder
        layers: list[nn.Module] = [T5LayerSelfAttention(cfg, has_relative_bias=has_relative_bias)]
        if is_decoder:
            layers.append(T5LayerCrossAttention(cfg))
        layers.append(T5LayerFF(cfg))
        self.layer = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, bias: torch.Tensor,
                encoder_out: torch.Tensor | None) -> torch.Tensor:
        x = self.layer[0](x, bias)
        if self.is_decoder:
            x = self.layer[1](x, encoder_out)
        return self.layer[-1](x)


class T5Stack(nn.Module):
    def __init__(self, cfg: T5Config, embed_tokens: nn.Embedding, *, is_decoder: bool) -> None:
        super().__init__()
        self.is_decoder = is_decoder
        self.embed_tokens = embed_tokens  # the model's `shared`: one module, two owners
        n = cfg.num_decoder_layers if is_decoder else cfg.num_layers
        self.block = nn.ModuleList(T5Block(cfg, is_decoder=is_decoder, has_relative_bias=i == 0)
                                   for i in range(n))
        self.final_layer_norm = T5LayerNorm(cfg.d_model, cfg.layer_norm_epsilon)

    def forward(self, ids: torch.Tensor, encoder_out: torch.Tensor | None = None) -> torch.Tensor:
        x = self.embed_tokens(ids)
        t = ids.shape[1]
        # Block 0 computes the position bias; every later block of the stack reuses it.
        bias = self.block[0].layer[0].SelfAttention.position_bias(t, t, self.is_decoder)
        for block in self.block:
            x = block(x, bias, encoder_out)
        return self.final_layer_norm(x)


class T5ForConditionalGeneration(nn.Module):
    def __init__(self, cfg: T5Config) -> None:
        super().__init__()
        self.config = cfg
        self.shared = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.encoder = T5Stack(cfg, self.shared, is_decoder=False)
        self.decoder = T5Stack(cfg, self.shared, is_decoder=True)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        encoder_out = self.encoder(input_ids)
        return self.lm_head(self.decoder(decoder_input_ids, encoder_out))


def seq2seq_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1))


def init_t5(model: T5ForConditionalGeneration, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
