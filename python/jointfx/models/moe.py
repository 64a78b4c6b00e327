"""A tiny decoder with mixture-of-experts FFNs: top-k token-choice routing and an auxiliary
load-balancing loss.

FQNs in the Llama/Mixtral style, with torchtitan's grouped experts: model.embed_tokens,
model.layers.N.input_layernorm, model.layers.N.self_attn.q_proj / k_proj / v_proj / o_proj,
model.layers.N.post_attention_layernorm, model.layers.N.moe.router.gate (Linear dim -> experts),
model.layers.N.moe.experts.w1 / w2 / w3 (stacked expert weights [experts, ...], so FSDP shards
the expert dim), model.norm, lm_head.

Routing: softmax over the router logits, aten.topk picks top_k experts per token, their
probabilities (renormalized) weight the experts' outputs. Every expert runs on every token and
the unrouted ones get weight 0: the graph has static shapes, as a traced graph must. The
auxiliary loss is Switch Transformer's load-balancing loss, experts * sum_e(f_e * P_e) (f_e:
fraction of routed slots that went to expert e, P_e: mean router probability), summed over
layers and scaled by aux_loss_coef; the model returns (logits, aux_loss).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class MoEConfig:
    vocab_size: int = 32
    hidden_size: int = 16
    num_layers: int = 2
    num_heads: int = 2
    num_experts: int = 4
    top_k: int = 2
    expert_hidden: int = 16
    aux_loss_coef: float = 0.01
    norm_eps: float = 1e-5

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SelfAttention(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.n_head = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        d = cfg.hidden_size
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (p(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, c))


class Router(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)


class GroupedExperts(nn.Module):
    """SwiGLU experts with stacked weights: w1, w3 [experts, dim, hidden], w2 [experts, hidden,
    dim]."""

    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        e, d, h = cfg.num_experts, cfg.hidden_size, cfg.expert_hidden
        self.w1 = nn.Parameter(torch.empty(e, d, h))
        self.w2 = nn.Parameter(torch.empty(e, h, d))
        self.w3 = nn.Parameter(torch.empty(e, d, h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [tokens, dim] -> every expert's output [experts, tokens, dim]."""
        xe = x.unsqueeze(0).expand(self.w1.shape[0], -1, -1)
        return torch.bmm(F.silu(torch.bmm(xe, self.w1)) * torch.bmm(xe, self.w3), self.w2)


class MoE(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.top_k = cfg.top_k
        self.num_experts = cfg.num_experts
        self.router = Router(cfg)
        self.experts = GroupedExperts(cfg)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        tokens = x.reshape(-1, d)
        probs = F.softmax(self.router.gate(tokens).float(), dim=-1)  # [tokens, experts]
        top_p, top_i = torch.topk(probs, self.top_k, dim=-1)
        top_p = top_p / top_p.sum(dim=-1, keepdim=True)
        weights = torch.zeros_like(probs).scatter(-1, top_i, top_p)  # 0 for unrouted experts
        out = torch.einsum("etd,te->td", self.experts(tokens), weights.to(x.dtype))
        # Load balancing: fraction of routed slots per expert (no gradient) x mean probability.
        routed = torch.zeros_like(probs).scatter(-1, top_i, 1.0)  # [tokens, experts]
        fraction = routed.mean(dim=0) / self.top_k
        aux = self.num_experts * (fraction * probs.mean(dim=0)).sum()
        return out.view(b, t, d), aux


class DecoderLayer(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.self_attn = SelfAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        self.moe = MoE(cfg)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = x + self.self_attn(self.input_layernorm(x))
        moe_out, aux = self.moe(self.post_attention_layernorm(h))
        return h + moe_out, aux


class MoEModel(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.embed_tokens(input_ids)
        aux_total = None
        for layer in self.layers:
            h, aux = layer(h)
            aux_total = aux if aux_total is None else aux_total + aux
        assert aux_total is not None
        return self.norm(h), aux_total


class MoEForCausalLM(nn.Module):
    def __init__(self, cfg: MoEConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = MoEModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits, aux_loss_coef * load-balancing loss summed over layers)."""
        h, aux = self.model(input_ids)
        return self.lm_head(h), aux * self.config.aux_loss_coef


def init_moe(model: MoEForCausalLM, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name or name == "model.norm.weight":
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def moe_loss(outputs: tuple[torch.Tensor, torch.Tensor],
             labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(token cross-entropy, the model's auxiliary loss): jointfx.trace adds the two."""
    logits, aux = outputs
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1)), aux
