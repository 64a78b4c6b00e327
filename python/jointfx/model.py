"""A tiny Llama-3-style transformer for tracing joint graphs.

Module names follow torchtitan's llama3 (tok_embeddings, layers.N.attention.wq/wk/wv/wo,
layers.N.feed_forward.w1/w2/w3, layers.N.attention_norm, layers.N.ffn_norm, norm, output) so the
FQNs in traced graphs look like the ones our passes meet in real GraphTrainer graphs.

Every op is written out in plain aten-friendly arithmetic (RMSNorm by rsqrt, RoPE with real
cos/sin), so a traced graph needs nothing beyond the c10 dispatcher to run.

Tensor parallelism is built in but dormant: `tp_size` > 1 makes the attention heads and the FFN
hidden dim local to one TP rank, and the two `tp_*` hooks (identity by default) mark where the
Megatron-style activation collectives go. The tracer installs real collectives there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# A function applied to an activation at a TP boundary (identity when there is no TP).
ActivationHook = Callable[[torch.Tensor], torch.Tensor]


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(frozen=True)
class ModelArgs:
    dim: int = 16
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 32
    ffn_hidden_dim: int = 32
    max_seq_len: int = 8
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = False
    # Tensor-parallel degree: wq/wk/wv/w1/w3 are column-parallel, wo/w2 row-parallel.
    tp_size: int = 1

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def validate(self) -> None:
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(f"dim/heads do not divide: {self}")
        if self.n_heads % self.tp_size or self.n_kv_heads % self.tp_size:
            raise ValueError(f"heads must divide by tp_size: {self}")
        if self.ffn_hidden_dim % self.tp_size:
            raise ValueError(f"ffn_hidden_dim must divide by tp_size: {self}")
        if self.head_dim % 2:
            raise ValueError("RoPE needs an even head_dim")


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in float32 and cast back (as torchtitan does for bf16)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(args: ModelArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [max_seq_len, head_dim // 2] of the rotary embedding."""
    half = args.head_dim // 2
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, half, dtype=torch.float64) / half))
    angles = torch.outer(torch.arange(args.max_seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates interleaved pairs (x0, x1) of the last dim by the position's angle.

    x: [batch, seq, heads, head_dim]; cos/sin: [seq, head_dim // 2].
    """
    pairs = x.float().unflatten(-1, (-1, 2))
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    rotated = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return rotated.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads = args.n_heads // args.tp_size
        self.n_kv_heads = args.n_kv_heads // args.tp_size
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, args.dim, bias=False)
        # Column-parallel input (identity fwd, all-reduce bwd) / row-parallel output (all-reduce
        # fwd, identity bwd); set by the tracer for TP.
        self.tp_enter: ActivationHook = _identity
        self.tp_exit: ActivationHook = _identity

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        bsz, seqlen, _ = x.shape
        x = self.tp_enter(x)
        q = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        k = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # SDPA wants [batch, heads, seq, head_dim]; enable_gqa shares each kv head among
        # n_heads / n_kv_heads query heads without materializing repeated k/v.
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
            enable_gqa=True)
        out = out.transpose(1, 2).reshape(bsz, seqlen, self.n_heads * self.head_dim)
        return self.tp_exit(self.wo(out))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        hidden = args.ffn_hidden_dim // args.tp_size
        self.w1 = nn.Linear(args.dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, hidden, bias=False)
        self.tp_enter: ActivationHook = _identity
        self.tp_exit: ActivationHook = _identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.tp_enter(x)
        return self.tp_exit(self.w2(F.silu(self.w1(x)) * self.w3(x)))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        args.validate()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        # ModuleDict keyed "0", "1", ... gives torchtitan's "layers.N" FQNs.
        self.layers = nn.ModuleDict({str(i): TransformerBlock(args) for i in range(args.n_layers)})
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(args)
        # Buffers, not parameters: they become graph inputs of kind "buffer".
        self.register_buffer("rope_cos", cos)
        self.register_buffer("rope_sin", sin)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seqlen = tokens.shape[1]
        cos, sin = self.rope_cos[:seqlen], self.rope_sin[:seqlen]
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def init_weights(model: Transformer, seed: int = 0) -> None:
    """Deterministic small random weights (norm weights stay 1), independent of global RNG."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * 0.02)


def cross_entropy_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean token cross-entropy in float32 (bf16 logits are upcast first)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
