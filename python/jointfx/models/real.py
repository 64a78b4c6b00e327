"""Models from real model libraries (Hugging Face transformers, timm, torchvision), tiny and seeded.

The other cases of jointfx.models are the project's own imitations of model families; these are
the libraries' own classes, built from a config with tiny sizes and random initialization under
a fixed seed (nothing is downloaded: `from_config`, `pretrained=False`). Each `RealCase` says how
to build the model, a seeded batch in the form the model is called with (Hugging Face models by
keyword, `model(**batch)`, computing their own loss from `labels`), and the loss;
`trace_real_case` traces one with jointfx.trace. scripts/gen_fixtures.py writes `REAL_FIXTURES`
to tests/data/traced/<name>_w<N>.json (docs/pytorch-bridge.md, "Real model libraries").

| case | model | what it brings |
|---|---|---|
| hf_llama | transformers' LlamaForCausalLM, 2 layers | keyword inputs (input_ids, attention_mask, labels), the model's own shifted loss, SDPA with a padding mask built by transformers' mask functions |
| hf_t5 | transformers' T5ForConditionalGeneration, 2 + 2 layers | encoder-decoder by keyword (the decoder input shifted from labels inside the model), T5DenseActDense's `self.wo.weight.dtype` checks (metadata reads: no gather), dropout |
| hf_qwen3_moe | transformers' Qwen3MoeForCausalLM, 2 layers of 4 experts (top 2) | routing through `aten.sort`, `histc`, `cumsum` and `index_put`, experts run by `aten._grouped_mm` on 3-D expert weights, the router's load-balancing loss inside the model's loss |
| hf_whisper | transformers' WhisperForConditionalGeneration, 2 + 2 layers | a Conv1d stem over log-mel features, cross-attention, the encoder's position embedding frozen by transformers (requires_grad=False: gathered, no gradient), proj_out tied to the decoder embedding |
| hf_lora_llama | transformers' LlamaForCausalLM, every weight frozen, LoRA adapters (rank 4) on q_proj and v_proj | fine-tuning: 21 frozen parameters gathered for forward, only the 8 adapter matrices get gradients |
| timm_vit | timm's VisionTransformer, 2 blocks | fused qkv, root cls_token / pos_embed, blocks named `blocks.N` |
| timm_convnext | timm's ConvNeXt, 4 stages of 1, 2, 1, 1 blocks | depthwise 7x7 convolutions, LayerNorm2d (channels-last norm by permutes), layer scale (`gamma`), stages with downsample layers |
| timm_resnet18 | timm's ResNet-18 (BasicBlock, layers 2-2-2-2), stages 64, 16, 16, 16 wide | BatchNorm in training mode (running statistics as buffers, updated in place), max pool, downsample shortcuts, blocks named `layerN.M` |

torchvision's resnet18 is the same network as timm's (tests/python/test_real_models.py traces it
at its full width and compares); its widths are fixed, so the fixture uses timm's narrow one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# Model code must never reach the network: the configs below build everything locally, and these
# make any attempt by the libraries to fetch a file fail instead of downloading.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

Batch = tuple[Any, Any]  # (example_inputs, targets) in any form jointfx.trace accepts


@dataclass(frozen=True)
class RealCase:
    name: str
    library: str                         # the distribution: transformers, timm, torchvision
    build: Callable[[int], nn.Module]    # seed -> a model with seeded weights, in training mode
    batch: Callable[[int], Batch]        # seed -> (example_inputs, targets)
    loss_fn: Callable[..., Any] | None   # None: the model computes its loss (labels=)
    config: dict[str, Any]               # what the model was built from, for graph meta
    input_names: tuple[str, ...] | None = None
    target_names: tuple[str, ...] | None = None


def library_version(library: str) -> str:
    from importlib.metadata import version

    return version(library)


def _seeded(seed: int, make: Callable[[], nn.Module]) -> nn.Module:
    """make() with torch's global generator seeded (the libraries initialize their weights from
    it), without disturbing the caller's generator; the model in training mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = make()
    return model.train()


# ----------------------------------------------------------------------------- Hugging Face

_LLAMA = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
              num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
              use_cache=False)
_T5 = dict(vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2,
           num_heads=2, relative_attention_num_buckets=8, relative_attention_max_distance=16,
           dropout_rate=0.0, use_cache=False, decoder_start_token_id=0, pad_token_id=0)
_QWEN3_MOE = dict(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=16,
                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                  num_experts=4, num_experts_per_tok=2, max_position_embeddings=32,
                  output_router_logits=True, router_aux_loss_coef=0.01, use_cache=False)


def _hf_causal_lm(config_class: str, kwargs: Mapping[str, Any]) -> Callable[[int], nn.Module]:
    def build(seed: int) -> nn.Module:
        import transformers

        cfg = getattr(transformers, config_class)(**kwargs)
        return _seeded(seed, lambda: transformers.AutoModelForCausalLM.from_config(cfg))

    return build


def _lm_batch(vocab: int, batch: int = 2, seq: int = 8) -> Callable[[int], Batch]:
    """seed -> ({input_ids, attention_mask, labels}, no targets): the second sequence padded
    for its last 3 positions (mask 0, label -100, ignored by the loss)."""

    def make(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(1, vocab, (batch, seq), generator=gen)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[1, seq - 3:] = 0
        labels = ids.masked_fill(mask == 0, -100)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}, ()

    return make


_WHISPER = dict(vocab_size=64, num_mel_bins=8, d_model=16, encoder_layers=2, decoder_layers=2,
                encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                decoder_ffn_dim=32, max_source_positions=8, max_target_positions=16,
                decoder_start_token_id=1, pad_token_id=0, eos_token_id=2, bos_token_id=1,
                dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, use_cache=False)
_LORA_RANK = 4
_LORA_TARGETS = ("q_proj", "v_proj")


def _whisper_build(seed: int) -> nn.Module:
    """transformers' Whisper, whose encoder position embedding is frozen by the library itself
    (`embed_positions.requires_grad_(False)`: sinusoids, never trained)."""
    import transformers

    cfg = transformers.WhisperConfig(**_WHISPER)
    return _seeded(seed, lambda: transformers.WhisperForConditionalGeneration(cfg))


def _whisper_batch(seed: int) -> Batch:
    """Log-mel features (2 x max_source_positions frames: the encoder's convolutions halve
    them) and target labels; the model shifts the labels right behind decoder_start_token_id."""
    gen = torch.Generator().manual_seed(seed)
    feats = torch.randn(2, _WHISPER["num_mel_bins"], 2 * _WHISPER["max_source_positions"],
                        generator=gen)
    labels = torch.randint(3, _WHISPER["vocab_size"], (2, 6), generator=gen)
    return {"input_features": feats, "labels": labels}, ()


class LoraLinear(nn.Module):
    """A frozen base Linear plus a trained low-rank update, as LoRA fine-tuning adds it:
    y = base(x) + (x A^T) B^T * scale. B starts at zero in LoRA; here it is seeded small, so
    that the base path and the adapters both reach the gradients a test compares."""

    def __init__(self, base: nn.Linear, rank: int, scale: float = 2.0) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.randn(rank, base.in_features) * 0.1)
        self.lora_b = nn.Parameter(torch.randn(base.out_features, rank) * 0.1)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + F.linear(F.linear(x, self.lora_a), self.lora_b) * self.scale


def _lora_llama_build(seed: int) -> nn.Module:
    """transformers' Llama with every pretrained weight frozen and LoRA adapters on the
    attention's q_proj and v_proj: the fine-tuning setup of most FSDP users."""

    def make() -> nn.Module:
        import transformers

        model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**_LLAMA))
        model.requires_grad_(False)
        for layer in model.model.layers:
            for name in _LORA_TARGETS:
                setattr(layer.self_attn, name,
                        LoraLinear(getattr(layer.self_attn, name), _LORA_RANK))
        return model

    return _seeded(seed, make)


def _t5_build(seed: int) -> nn.Module:
    import transformers

    cfg = transformers.T5Config(**_T5)
    return _seeded(seed, lambda: transformers.T5ForConditionalGeneration(cfg))


def _t5_batch(seed: int) -> Batch:
    """Source ids with a padded second sequence, target labels; the model shifts the labels
    right behind decoder_start_token_id to make the decoder's input."""
    gen = torch.Generator().manual_seed(seed)
    batch, src, tgt = 2, 8, 6
    ids = torch.randint(1, _T5["vocab_size"], (batch, src), generator=gen)
    mask = torch.ones(batch, src, dtype=torch.long)
    mask[1, src - 2:] = 0
    labels = torch.randint(1, _T5["vocab_size"], (batch, tgt), generator=gen)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}, ()


# ----------------------------------------------------------------------------- timm, torchvision

_TIMM_VIT = dict(img_size=16, patch_size=8, embed_dim=16, depth=2, num_heads=2, mlp_ratio=2.0,
                 num_classes=5)
_TIMM_CONVNEXT = dict(depths=(1, 2, 1, 1), dims=(8, 16, 16, 16), num_classes=5)
# timm's plain stem is 64 wide whatever the stages' widths; the first stage keeps 64 so that, as in
# ResNet-18, it needs no downsample shortcut (stages 2-4 have one, for their stride).
_TIMM_RESNET18 = dict(channels=(64, 16, 16, 16), num_classes=5)
IMAGE_BATCH = 4


def _timm(name: str, kwargs: Mapping[str, Any]) -> Callable[[int], nn.Module]:
    def build(seed: int) -> nn.Module:
        import timm

        return _seeded(seed, lambda: timm.create_model(name, pretrained=False, **kwargs))

    return build


def _images(size: int, num_classes: int) -> Callable[[int], Batch]:
    def make(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        images = torch.randn(IMAGE_BATCH, 3, size, size, generator=gen)
        labels = torch.randint(0, num_classes, (IMAGE_BATCH,), generator=gen)
        return [images], [labels]

    return make


def _config(library: str, builder: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Graph meta model.config: the library and how the model was built (tuples as lists)."""
    return {"library": library, "builder": builder,
            "kwargs": {k: list(v) if isinstance(v, tuple) else v for k, v in kwargs.items()}}


def _hf_case(name: str, config_class: str, kwargs: Mapping[str, Any]) -> RealCase:
    return RealCase(name, "transformers", _hf_causal_lm(config_class, kwargs),
                    _lm_batch(kwargs["vocab_size"]), None,
                    _config("transformers", f"AutoModelForCausalLM.from_config({config_class})",
                            kwargs))


def _timm_case(name: str, model: str, kwargs: Mapping[str, Any], size: int) -> RealCase:
    return RealCase(name, "timm", _timm(model, kwargs), _images(size, kwargs["num_classes"]),
                    F.cross_entropy, _config("timm", f"create_model({model!r})", kwargs),
                    ("images",), ("labels",))


REAL_CASES: dict[str, RealCase] = {c.name: c for c in (
    _hf_case("hf_llama", "LlamaConfig", _LLAMA),
    RealCase("hf_t5", "transformers", _t5_build, _t5_batch, None,
             _config("transformers", "T5ForConditionalGeneration(T5Config)", _T5)),
    _hf_case("hf_qwen3_moe", "Qwen3MoeConfig", _QWEN3_MOE),
    RealCase("hf_whisper", "transformers", _whisper_build, _whisper_batch, None,
             _config("transformers", "WhisperForConditionalGeneration(WhisperConfig)",
                     _WHISPER)),
    RealCase("hf_lora_llama", "transformers", _lora_llama_build, _lm_batch(_LLAMA["vocab_size"]),
             None, _config("transformers", "LlamaForCausalLM(LlamaConfig), frozen, LoRA rank "
                           f"{_LORA_RANK} on {', '.join(_LORA_TARGETS)}", _LLAMA)),
    _timm_case("timm_vit", "vit_tiny_patch16_224", _TIMM_VIT, 16),
    _timm_case("timm_convnext", "convnext_atto", _TIMM_CONVNEXT, 32),
    _timm_case("timm_resnet18", "resnet18", _TIMM_RESNET18, 32),
)}

# (case, world size) pairs written to tests/data/traced/<case>_w<world>.json.
REAL_FIXTURES: tuple[tuple[str, int], ...] = tuple((name, 2) for name in REAL_CASES)

WEIGHT_SEED, BATCH_SEED = 0, 1


def flat_user_inputs(batch: Batch) -> list[torch.Tensor]:
    """The batch's tensors in graph-input order: inputs (positional, then keyword values in
    order), then targets the same way."""
    out: list[torch.Tensor] = []
    for part in batch:
        if isinstance(part, Mapping):
            out.extend(part.values())
        else:
            out.extend(part)
    return out


def user_inputs_by_name(case: RealCase, batch: Batch) -> list[tuple[str, torch.Tensor]]:
    """(graph input name, tensor) for each user input of the traced graph, in order: a keyword
    input is named by its key, a positional one by the case's input_names / target_names."""
    out: list[tuple[str, torch.Tensor]] = []
    for part, names in zip(batch, (case.input_names, case.target_names)):
        if isinstance(part, Mapping):
            out.extend(part.items())
        else:
            tensors = list(part)
            if not tensors:
                continue
            if names is None or len(names) != len(tensors):
                raise ValueError(f"{case.name}: {len(tensors)} positional tensors, names {names}")
            out.extend(zip(names, tensors))
    return out


def trace_real_case(name: str, world_size: int | None = None, *,
                    model: nn.Module | None = None, **overrides: Any) -> Any:
    """jointfx.trace of one case (seeded weights and batch) at `world_size` (None: the
    initialized world). Returns the TracedGraph."""
    from jointfx.trace import trace

    case = REAL_CASES[name]
    model = model if model is not None else case.build(WEIGHT_SEED)
    inputs, targets = case.batch(BATCH_SEED)
    config = {**case.config, "version": library_version(case.library)}
    return trace(model, case.loss_fn, inputs, targets, world_size=world_size,
                 input_names=case.input_names, target_names=case.target_names, config=config,
                 **overrides)


def eager_loss(case: RealCase, model: nn.Module, batch: Batch) -> torch.Tensor:
    """The loss of one eager step of `model` on `batch`: what the traced graph's loss output is."""
    inputs, targets = batch
    if isinstance(inputs, Mapping):
        out = model(**inputs)
    else:
        out = model(*inputs)
    if case.loss_fn is None:
        return out["loss"] if isinstance(out, Mapping) else out
    return case.loss_fn(out, *targets)
