"""GraphTrainer configs that run on CPU: every debug model of torchtitan 0.3.0's graph_trainer
families with SDPA attention in place of FlexAttention, whose kernels need a GPU.

    python -m jointfx.torchtitan --module jointfx.torchtitan.configs \\
        --config graph_trainer_qwen3_debugmodel_sdpa --compile.pass_pipeline jointfx ...

torchtitan ships an SDPA variant of the llama3 debug model only
(`graph_trainer_llama3_debugmodel_sdpa`); each config here is the family's own config function
with its model spec rebuilt by the family's `model_registry` for the same flavor with
`attn_backend="sdpa"`, as torchtitan's own `graph_trainer_deepseek_v3_16b_sdpa` does. Everything
else (loss, optimizer, parallelism defaults, MoE settings) is the original's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

# (family, the registry's config functions that get an `_sdpa` twin here).
SDPA_VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("llama3", ("graph_trainer_llama3_debugmodel",)),
    ("qwen3", ("graph_trainer_qwen3_debugmodel", "graph_trainer_qwen3_debugmodel_moe")),
    ("deepseek_v3", ("graph_trainer_deepseek_v3_debugmodel",)),
)


def with_sdpa(family: str, config_fn: str) -> Any:
    """`config_fn` of graph_trainer's `family` config registry, its model on SDPA attention."""
    package = f"torchtitan.experiments.graph_trainer.{family}"
    registry = importlib.import_module(f"{package}.config_registry")
    config = getattr(registry, config_fn)()
    flavor = config.model_spec.flavor
    config.model_spec = importlib.import_module(package).model_registry(flavor,
                                                                        attn_backend="sdpa")
    return config


def _variant(family: str, config_fn: str) -> Callable[[], Any]:
    def config() -> Any:
        return with_sdpa(family, config_fn)

    config.__name__ = config.__qualname__ = f"{config_fn}_sdpa"
    config.__doc__ = f"{config_fn} with SDPA attention (runs on CPU)."
    return config


for _family, _fns in SDPA_VARIANTS:
    for _fn in _fns:
        globals()[f"{_fn}_sdpa"] = _variant(_family, _fn)

__all__ = ["SDPA_VARIANTS", "with_sdpa"] + [f"{fn}_sdpa" for _, fns in SDPA_VARIANTS
                                            for fn in fns]
