"""torchtitan's shipped GraphTrainer configs traced at full size, on a machine with no GPU.

`trace_preset("llama3_70b_w64")` takes one of torchtitan 0.3.0's own config functions (the 8B,
70B, DeepSeek-V3 16B ... configs of experiments/graph_trainer), its model on SDPA attention (the
shipped FlexAttention needs a GPU kernel to trace its backward), and does what GraphTrainer does
before its first step, without one byte of parameter memory:

- torch.distributed on the fake process group at the preset's world size, torchtitan's own
  `ParallelDims` and device meshes (FSDP, TP, EP as the preset says);
- the model built on the meta device at the config's own dtype, then the family's own
  `parallelize_fn` (TP, SimpleFSDP, module FQN annotations);
- `make_fwd_bwd_step` traced by GraphTrainer's `minimal_fx_tracer` (fake tensors), with
  loss parallelism under TP, as GraphTrainer's precompile does;
- GraphTrainer's own pass list (`construct_default_graph_passes` for the config) applied in two
  ways: up to and including its memory policy, which is the graph `--compile.pass_pipeline
  jointfx` hands to jointfx (`ScaleTrace.jointfx_input`), and in full up to its terminal Inductor /
  cudagraph passes, which is GraphTrainer's own plan (`ScaleTrace.graph_trainer_plan`): the anchor
  a jointfx plan is compared with.

`layers` keeps the first n transformer blocks (the test fixtures); every other dimension is the
config's. Graphs carry `meta` tensors; jointfx reads shapes and dtypes only.

    python -m jointfx.titan_scale --preset llama3_8b_w8 [--layers 2] [--batch 1]
                                  [--out in.json] [--graph-trainer-out gt.json]

`bench/titan_scale.py` runs every preset through `jointfx verify`, `analyze`, `opt -p default`
and `opt -p auto` and writes the table in bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Preset:
    """One traced configuration: a graph_trainer family's config function at a world size."""

    family: str  # graph_trainer subpackage: llama3, qwen3, deepseek_v3
    config_fn: str  # a function of that subpackage's config_registry
    world: int
    tp: int = 1
    ep: int = 1
    batch: int = 1  # local batch size (sequences per rank); the config's own seq_len


PRESETS: dict[str, Preset] = {
    "llama3_8b_w8": Preset("llama3", "graph_trainer_llama3_8b", 8),
    "llama3_70b_w64": Preset("llama3", "graph_trainer_llama3_70b", 64),
    "llama3_70b_tp8_w64": Preset("llama3", "graph_trainer_llama3_70b", 64, tp=8),
    "deepseek_v3_16b_w8": Preset("deepseek_v3", "graph_trainer_deepseek_v3_16b", 8, batch=4),
    "deepseek_v3_16b_ep8_w8": Preset("deepseek_v3", "graph_trainer_deepseek_v3_16b", 8, ep=8,
                                     batch=4),
    "qwen3_14b_w8": Preset("qwen3", "graph_trainer_qwen3_14b", 8),
}

# GraphTrainer passes after which the graph is what jointfx's registered pipelines receive
# (jointfx.torchtitan composes its pass right after the last of these the list has).
_INPUT_ANCHORS = ("eliminate_dead_code_pass", "canonicalize_graph_pass",
                  "tag_with_memory_policy_pass", "apply_cpu_offload_pass")


@dataclass
class ScaleTrace:
    """A full-size GraphTrainer trace and what exporting and planning it needs."""

    preset: str
    traced: Any  # make_fx_tracer.TracedResult; traced.gm is the graph as traced
    model: torch.nn.Module  # on the meta device, parallelized
    config: Any  # GraphTrainer.Config
    parallel_dims: Any
    layers: int

    def _passes(self) -> list[Any]:
        from torchtitan.experiments.graph_trainer.passes import construct_default_graph_passes

        from jointfx.torchtitan import _TERMINAL, _pass_name

        passes = construct_default_graph_passes(self.traced, self.config,
                                                parallel_dims=self.parallel_dims)
        end = next((i for i, p in enumerate(passes) if _pass_name(p) in _TERMINAL), len(passes))
        return [(p, _pass_name(p)) for p in passes[:end]]

    def _apply(self, passes: list[Any]) -> torch.fx.GraphModule:
        import copy

        from torchtitan.experiments.graph_trainer.passes import apply_graph_passes

        gm = copy.deepcopy(self.traced.gm)
        return apply_graph_passes(gm, self.traced.example_inputs, [p for p, _ in passes],
                                  respect_disable_passes=False)

    def jointfx_input(self) -> torch.fx.GraphModule:
        """The graph after GraphTrainer's cleanup and memory policy: what jointfx receives."""
        passes = self._passes()
        end = max((i + 1 for i, (_, n) in enumerate(passes) if n in _INPUT_ANCHORS), default=0)
        return self._apply(passes[:end])

    def graph_trainer_plan(self) -> torch.fx.GraphModule:
        """GraphTrainer's own pass list up to its Inductor / cudagraph passes."""
        return self._apply(self._passes())

    def export(self, gm: torch.fx.GraphModule, plan: str) -> dict[str, Any]:
        """`gm` (one of the two graphs above) as a jointfx JSON document."""
        from jointfx.export import export_graph, specs_from_traced

        p = PRESETS[self.preset]
        numel = sum(t.numel() for t in self.model.parameters())
        meta = {"world_size": p.world, "traced_rank": 0,
                "model": {"family": p.family, "config": p.config_fn, "layers": self.layers,
                          "tp": p.tp, "ep": p.ep, "local_batch": p.batch,
                          "seq_len": self.config.training.seq_len,
                          "parameter_numel": numel,
                          "tracer": "graph_trainer minimal_fx_tracer, meta device, fake group",
                          "attention": "SDPA traced as the fused flash-attention op"},
                "plan": plan}
        return export_graph(gm, **specs_from_traced(self.traced, self.model), graph_meta=meta)


@contextlib.contextmanager
def fused_attention_on_meta() -> Any:
    """While tracing: causal SDPA on meta tensors as the fused flash-attention op.

    On meta tensors `scaled_dot_product_attention` always takes its math path, which
    materializes the B x H x L x L scores (8 GiB a layer at 8B, sequence 8192) and saves them for
    backward; a GPU runs a fused kernel that saves only the log-sum-exp. torch has the flash op's
    meta kernel and autograd formula, so calling it directly traces what a GPU graph holds. SDPA
    with a mask or dropout, or on a real device, is left to torch."""
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention

    def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
        if attn_mask is not None or dropout_p or q.device.type != "meta":
            return sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale=scale,
                        enable_gqa=enable_gqa)
        if enable_gqa and k.size(-3) != q.size(-3):  # grouped-query: as SDPA's math path does
            k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)
            v = v.repeat_interleave(q.size(-3) // v.size(-3), dim=-3)
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal,
                                                                  scale=scale)[0]

    F.scaled_dot_product_attention = fused
    try:
        yield
    finally:
        F.scaled_dot_product_attention = sdpa


@contextlib.contextmanager
def autocast_off_on_meta() -> Any:
    """While tracing: `torch.autocast(device_type="meta")` is a disabled autocast.

    torch refuses autocast on the meta device; MoE routers open one with the input's device type
    (to compute in float32). Disabled is what the same region does on CPU, where float32 is no
    autocast dtype either; on a GPU the router's few small matmuls would run in float32."""
    autocast = torch.autocast

    class MetaAutocast(autocast):  # type: ignore[misc,valid-type]
        def __init__(self, device_type: str, *args: Any, **kwargs: Any) -> None:
            if device_type == "meta":
                kwargs["enabled"] = False
                device_type = "cpu"
            super().__init__(device_type, *args, **kwargs)

    torch.autocast = MetaAutocast  # type: ignore[misc]
    try:
        yield
    finally:
        torch.autocast = autocast  # type: ignore[misc]


def _config(p: Preset, layers: int | None, batch: int) -> Any:
    from jointfx.torchtitan.configs import with_sdpa

    config = with_sdpa(p.family, p.config_fn)
    par = config.parallelism
    par.tensor_parallel_degree = p.tp
    par.expert_parallel_degree = p.ep
    par.data_parallel_replicate_degree = 1
    par.data_parallel_shard_degree = p.world // p.tp
    par.pipeline_parallel_degree = 1
    par.context_parallel_degree = 1
    config.training.local_batch_size = batch
    model = config.model_spec.model
    if layers is not None:
        if not 1 <= layers <= len(model.layers):
            raise ValueError(f"{p.config_fn} has {len(model.layers)} layers, not {layers}")
        model.layers = list(model.layers[:layers])
    return config


def trace_preset(name: str, *, layers: int | None = None, batch: int | None = None
                 ) -> ScaleTrace:
    """Traces preset `name` (PRESETS) at full size, its first `layers` blocks (default all), at
    `batch` sequences per rank (default the preset's). Initializes the fake process group at the
    preset's world (an initialized default group is destroyed first)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.config import TORCH_DTYPE_MAP
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils
    from torchtitan.experiments.graph_trainer import simple_fsdp
    from torchtitan.experiments.graph_trainer.make_fx_tracer import minimal_fx_tracer
    from torchtitan.experiments.graph_trainer.trainer import make_fwd_bwd_step
    from torchtitan.tools import utils

    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    p = PRESETS[name]
    config = _config(p, layers, p.batch if batch is None else batch)
    par = config.parallelism
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=p.world)
    dist_utils.set_spmd_backend(par.spmd_backend)
    dims = ParallelDims(dp_shard=par.data_parallel_shard_degree, dp_replicate=1, cp=1, tp=p.tp,
                        pp=1, ep=p.ep, world_size=p.world, spmd_backend=par.spmd_backend)
    dims.build_mesh()
    spec = config.model_spec
    spec.model.update_from_config(config=config)
    simple_fsdp._wrap_class_cache.clear()  # see jointfx.titan._fsdp_model
    with torch.device("meta"), utils.set_default_dtype(TORCH_DTYPE_MAP[config.training.dtype]):
        model = spec.model.build()
    model = spec.parallelize_fn(model, parallel_dims=dims, training=config.training,
                                parallelism=par, compile_config=config.compile,
                                ac_config=config.activation_checkpoint,
                                dump_folder=config.dump_folder)
    model.train()
    loss_fn = config.loss.build(compile_config=config.compile)
    if isinstance(loss_fn, ChunkedLossWrapper):  # as the Trainer does after parallelizing
        loss_fn.set_lm_head(model.lm_head)
        model._skip_lm_head = True
    b, s = config.training.local_batch_size, config.training.seq_len
    meta = torch.device("meta")
    tokens = torch.zeros((b, s), dtype=torch.int64, device=meta)
    extra = {"positions": torch.arange(0, s, dtype=torch.int32, device=meta).expand(b, s)}
    valid = torch.tensor(b * s * dims.dp_shard, dtype=torch.int64, device=meta)
    loss_parallel = (torch.distributed.tensor.parallel.loss_parallel() if dims.tp_enabled
                     else contextlib.nullcontext())
    with loss_parallel, fused_attention_on_meta(), autocast_off_on_meta():
        traced = minimal_fx_tracer(make_fwd_bwd_step(model, loss_fn), module=model)(
            tokens, tokens, valid, extra)
    return ScaleTrace(name, traced, model, config, dims,
                      len(spec.model.layers))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), required=True)
    p.add_argument("--layers", type=int, help="keep the first N transformer blocks")
    p.add_argument("--batch", type=int, help="sequences per rank (default: the preset's)")
    p.add_argument("--out", help="write the graph jointfx receives (GraphTrainer's cleanup and "
                   "memory policy applied) as jointfx JSON")
    p.add_argument("--graph-trainer-out", help="write GraphTrainer's own plan of it")
    a = p.parse_args()
    from jointfx import titan, write_graph

    tr = trace_preset(a.preset, layers=a.layers, batch=a.batch)
    print({"preset": a.preset, "layers": tr.layers, **titan.summary(tr.traced.gm)})
    if a.out:
        write_graph(tr.export(tr.jointfx_input(), "graph_trainer memory policy"), a.out)
    if a.graph_trainer_out:
        write_graph(tr.export(tr.graph_trainer_plan(), "graph_trainer passes"),
                    a.graph_trainer_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
