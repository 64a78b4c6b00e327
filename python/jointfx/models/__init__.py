"""Small models of several families for tracing with jointfx.trace, and the fixtures made of them.

Each `ModelCase` says how to build a seeded model, a seeded batch, the loss function and what to
pass to jointfx.trace; `trace_case` traces one at a world size. scripts/gen_fixtures.py writes
`MODEL_FIXTURES` to tests/data/traced/<name>_w<N>.json.

| case | model | what it exercises |
|---|---|---|
| gpt2 | GPT-2, HF names (transformer.h.N), tied lm_head | dropout in training mode, a tied head |
| encoder | BERT-style encoder (encoder.layer.N), classification | two int inputs, class labels |
| convbn | conv + BatchNorm, nested stages (stages.M.blocks.N) | float images, BN buffers |
| moe | MoE decoder (model.layers.N.moe), top-2 routing | aten.topk, an auxiliary loss |
| vit | ViT from nn.TransformerEncoder (encoder.layers.N) | nn.MultiheadAttention reading out_proj.weight itself, [1, ...] root parameters |
| uneven | MLP with dims 7 and 3 | padded FSDP shards at world 4 |
| t5 | T5 encoder-decoder (encoder.block.N, decoder.block.N), shared embedding | two distinct stacks of blocks, cross-attention: the encoder's output read by every decoder block; a heterogeneous indexed list inside each block (block.N.layer.M) |
| lstm | embedding, 2-layer nn.LSTM with dropout, head (rnn.weight_ih_lN) | aten.mkldnn_rnn_layer and its backward: a workspace output empty in the meta, filled only with grad mode on; no repeated blocks |
| albert | ALBERT: one layer module (encoder.shared_layer) called 3 times | parameters reused by every depth with no indexed FQNs: 3 gathers and 3 reduce-scatters per parameter |
| uneven_bf16 | the same, bf16 gathers, fp32 reduction | padding with mixed precision |
| sequential | an nn.Sequential: Linear, residual MLP blocks, Linear (1.fc1.weight) | FQNs that start with an index: the root module holds the blocks |
| tvvit | ViT with torchvision's names (encoder.layers.encoder_layer_N, mlp.0 / mlp.3) | blocks named `<stem>_<int>`; an nn.Sequential of single layers inside each block |
| gpt2_sac | gpt2 with every transformer.h.N under SAC | dropout inside SAC regions: the mask is written in place into an empty_like that backward reads through an alias |
| lstm_sac | lstm with the nn.LSTM under SAC | SAC's alias of the LSTM workspace, empty in the meta and sized by the kernel at run time |
| mixer | MLP-Mixer (layers.N.token_mlp / channel_mlp), each channel-MLP Linear under SAC | token mixing by transposes; SAC regions that own their parameters (gathers inside the regions) |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from jointfx.models.albert import AlbertConfig, AlbertForSequenceClassification, init_albert
from jointfx.models.convbn import ConvBNConfig, ConvBNNet, classification_loss, init_convbn
from jointfx.models.encoder import BertForSequenceClassification, EncoderConfig, init_encoder
from jointfx.models.gpt2 import GPT2Config, GPT2LMHeadModel, init_gpt2, lm_loss
from jointfx.models.lstm import LstmConfig, LstmLM, init_lstm
from jointfx.models.mixer import Mixer, MixerConfig, checkpointed_linears, init_mixer
from jointfx.models.moe import MoEConfig, MoEForCausalLM, init_moe, moe_loss
from jointfx.models.sequential import SequentialConfig, sequential_model
from jointfx.models.t5 import T5Config, T5ForConditionalGeneration, init_t5, seq2seq_loss
from jointfx.models.tvvit import TvViTConfig, VisionTransformer, init_tvvit
from jointfx.models.uneven import UnevenConfig, UnevenMLP, init_mlp
from jointfx.models.vit import ViT, ViTConfig, init_vit

Batch = tuple[list[torch.Tensor], list[torch.Tensor]]  # (model inputs, loss targets)


@dataclass(frozen=True)
class ModelCase:
    name: str
    build: Callable[[int], nn.Module]  # seed -> a model with seeded weights, in training mode
    batch: Callable[[int], Batch]      # seed -> model inputs and loss targets
    loss_fn: Callable[..., Any] | None
    input_names: tuple[str, ...]
    target_names: tuple[str, ...]
    config: dict[str, Any]
    trace_kwargs: dict[str, Any] = field(default_factory=dict)
    # model -> the modules jointfx.trace runs under SAC (checkpoint_modules); None: none.
    checkpoint: Callable[[nn.Module], Sequence[nn.Module]] | None = None


def _builder(model_cls: Callable[[Any], nn.Module], cfg: Any,
             init: Callable[[Any, int], None]) -> Callable[[int], nn.Module]:
    """seed -> model_cls(cfg) with init(model, seed)'s weights, in training mode."""

    def build(seed: int) -> nn.Module:
        model = model_cls(cfg)
        init(model, seed)
        return model.train()

    return build


def _images_batch(batch: int, channels: int, size: int, num_classes: int
                  ) -> Callable[[int], Batch]:
    """seed -> float images [batch, channels, size, size] and class labels below num_classes."""

    def make_batch(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        images = torch.randn(batch, channels, size, size, generator=gen)
        labels = torch.randint(0, num_classes, (batch,), generator=gen)
        return [images], [labels]

    return make_batch


def _gpt2_case(name: str = "gpt2",
               checkpoint: Callable[[nn.Module], Sequence[nn.Module]] | None = None) -> ModelCase:
    cfg = GPT2Config()
    batch, seq = 2, 8

    build = _builder(GPT2LMHeadModel, cfg, init_gpt2)

    def make_batch(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen)
        return [ids], [ids.clone()]

    return ModelCase(name, build, make_batch, lm_loss, ("input_ids",), ("labels",),
                     cfg.to_json(), checkpoint=checkpoint)


def _gpt2_blocks(model: nn.Module) -> Sequence[nn.Module]:
    """GPT-2's transformer blocks (transformer.h.N), each an SAC region: dropout inside them."""
    return list(model.transformer.h)  # type: ignore[union-attr, arg-type]


def _encoder_case() -> ModelCase:
    cfg = EncoderConfig()
    batch, seq = 2, 8

    build = _builder(BertForSequenceClassification, cfg, init_encoder)

    def make_batch(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[1, seq - 3:] = 0  # the second sequence is padded
        labels = torch.randint(0, cfg.num_labels, (batch,), generator=gen)
        return [ids, mask], [labels]

    return ModelCase("encoder", build, make_batch, classification_loss,
                     ("input_ids", "attention_mask"), ("labels",), cfg.to_json())


def _convbn_case() -> ModelCase:
    cfg = ConvBNConfig()
    batch = 4

    build = _builder(ConvBNNet, cfg, init_convbn)

    make_batch = _images_batch(batch, cfg.in_channels, cfg.image_size, cfg.num_classes)

    return ModelCase("convbn", build, make_batch, classification_loss, ("images",), ("labels",),
                     cfg.to_json())


def _moe_case() -> ModelCase:
    cfg = MoEConfig()
    batch, seq = 2, 8

    build = _builder(MoEForCausalLM, cfg, init_moe)

    def make_batch(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen)
        labels = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen)
        return [ids], [labels]

    return ModelCase("moe", build, make_batch, moe_loss, ("input_ids",), ("labels",),
                     cfg.to_json())


def _vit_case() -> ModelCase:
    cfg = ViTConfig()
    batch = 4

    build = _builder(ViT, cfg, init_vit)

    make_batch = _images_batch(batch, cfg.in_channels, cfg.image_size, cfg.num_classes)

    return ModelCase("vit", build, make_batch, classification_loss, ("images",), ("labels",),
                     cfg.to_json())


def _t5_case() -> ModelCase:
    cfg = T5Config()
    batch, src_len, tgt_len = 2, 8, 6

    build = _builder(T5ForConditionalGeneration, cfg, init_t5)

    def make_batch(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, cfg.vocab_size, (batch, src_len), generator=gen)
        labels = torch.randint(0, cfg.vocab_size, (batch, tgt_len), generator=gen)
        # Teacher forcing: the decoder reads the labels shifted right behind a start token (0).
        decoder_ids = torch.cat([torch.zeros(batch, 1, dtype=torch.long), labels[:, :-1]], dim=1)
        return [ids, decoder_ids], [labels]

    return ModelCase("t5", build, make_batch, seq2seq_loss,
                     ("input_ids", "decoder_input_ids"), ("labels",), cfg.to_json())


def _albert_case() -> ModelCase:
    cfg = AlbertConfig()
    batch, seq = 2, 8

    build = _builder(AlbertForSequenceClassification, cfg, init_albert)

    def make_batch(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen)
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[0, seq - 2:] = 0  # the first sequence is padded
        labels = torch.randint(0, cfg.num_labels, (batch,), generator=gen)
        return [ids, mask], [labels]

    return ModelCase("albert", build, make_batch, classification_loss,
                     ("input_ids", "attention_mask"), ("labels",), cfg.to_json())


def _lstm_case(name: str = "lstm",
               checkpoint: Callable[[nn.Module], Sequence[nn.Module]] | None = None) -> ModelCase:
    cfg = LstmConfig()
    batch, seq = 3, 6

    build = _builder(LstmLM, cfg, init_lstm)

    def make_batch(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(1, cfg.vocab_size, (batch, seq), generator=gen)
        ids[2, seq - 2:] = 0  # the last sequence is padded
        return [ids], [ids.clone()]

    return ModelCase(name, build, make_batch, lm_loss, ("input_ids",), ("labels",),
                     cfg.to_json(), checkpoint=checkpoint)


def _lstm_rnn(model: nn.Module) -> Sequence[nn.Module]:
    """The nn.LSTM as one SAC region: SAC caches its workspace as an alias."""
    return [model.rnn]  # type: ignore[list-item]


def _features_batch(batch: int, in_features: int, num_classes: int) -> Callable[[int], Batch]:
    """seed -> float features [batch, in_features] and class labels below num_classes."""

    def make_batch(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        features = torch.randn(batch, in_features, generator=gen)
        labels = torch.randint(0, num_classes, (batch,), generator=gen)
        return [features], [labels]

    return make_batch


def _uneven_case(name: str = "uneven", **trace_kwargs: Any) -> ModelCase:
    cfg = UnevenConfig()
    return ModelCase(name, _builder(UnevenMLP, cfg, init_mlp),
                     _features_batch(5, cfg.in_features, cfg.num_classes), classification_loss,
                     ("features",), ("labels",), cfg.to_json(), trace_kwargs)


def _sequential_case() -> ModelCase:
    cfg = SequentialConfig()
    return ModelCase("sequential", _builder(sequential_model, cfg, init_mlp),
                     _features_batch(5, cfg.in_features, cfg.num_classes), classification_loss,
                     ("features",), ("labels",), cfg.to_json())


def _tvvit_case() -> ModelCase:
    cfg = TvViTConfig()
    batch = 4

    build = _builder(VisionTransformer, cfg, init_tvvit)

    make_batch = _images_batch(batch, cfg.in_channels, cfg.image_size, cfg.num_classes)

    return ModelCase("tvvit", build, make_batch, classification_loss, ("images",), ("labels",),
                     cfg.to_json())


def _mixer_case() -> ModelCase:
    cfg = MixerConfig()
    batch = 3

    def make_batch(seed: int) -> Batch:
        gen = torch.Generator().manual_seed(seed)
        patches = torch.randn(batch, cfg.tokens, cfg.patch_dim, generator=gen)
        labels = torch.randint(0, cfg.num_classes, (batch,), generator=gen)
        return [patches], [labels]

    return ModelCase("mixer", _builder(Mixer, cfg, init_mixer), make_batch, classification_loss,
                     ("patches",), ("labels",), cfg.to_json(), checkpoint=checkpointed_linears)


CASES: dict[str, ModelCase] = {c.name: c for c in (
    _gpt2_case(), _encoder_case(), _convbn_case(), _moe_case(), _vit_case(), _uneven_case(),
    _uneven_case("uneven_bf16", param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
    _t5_case(), _albert_case(), _lstm_case(), _sequential_case(), _tvvit_case(), _mixer_case(),
    _gpt2_case("gpt2_sac", checkpoint=_gpt2_blocks), _lstm_case("lstm_sac", checkpoint=_lstm_rnn),
)}

# (case, world size) pairs written to tests/data/traced/<case>_w<world>.json.
MODEL_FIXTURES: tuple[tuple[str, int], ...] = (
    ("gpt2", 2), ("encoder", 2), ("convbn", 2), ("moe", 2), ("vit", 2), ("uneven", 4),
    ("uneven_bf16", 4), ("t5", 2), ("albert", 2), ("lstm", 2), ("sequential", 2), ("tvvit", 2),
    ("mixer", 2), ("gpt2_sac", 2), ("lstm_sac", 2),
)

# The seeds of the weights and of the batch a case is traced and checked with.
WEIGHT_SEED, BATCH_SEED = 0, 1


def trace_case(name: str, world_size: int | None = None, *, model: nn.Module | None = None,
               **overrides: Any) -> Any:
    """jointfx.trace of one case (seeded weights and batch) at `world_size` (None: the
    initialized world). Returns the TracedGraph."""
    from jointfx.trace import trace

    case = CASES[name]
    model = model if model is not None else case.build(WEIGHT_SEED)
    inputs, targets = case.batch(BATCH_SEED)
    kwargs = {**case.trace_kwargs, **overrides}
    if case.checkpoint is not None:
        kwargs.setdefault("checkpoint_modules", case.checkpoint(model))
    return trace(model, case.loss_fn, inputs, targets, world_size=world_size,
                 input_names=case.input_names, target_names=case.target_names,
                 config=case.config, **kwargs)


def eager_loss(case: ModelCase, model: nn.Module, inputs: Sequence[torch.Tensor],
               targets: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(loss + auxiliary losses, the parts) of one eager step: what the traced graph computes."""
    out = model(*inputs)
    result = case.loss_fn(out, *targets) if case.loss_fn is not None else out
    parts = [result] if isinstance(result, torch.Tensor) else list(result)
    total = parts[0]
    for aux in parts[1:]:
        total = total + aux
    return total, parts
