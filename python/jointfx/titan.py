"""torchtitan GraphTrainer graphs on CPU: the tracer GraphTrainer itself uses, on small models.

`trace_model("llama3", n_layers=2)` builds one of torchtitan 0.3.0's graph_trainer model families
(`MODELS`: llama3, qwen3, deepseek_v3) at its `debugmodel` flavor shrunk to a few layers (SDPA
attention, so it traces on CPU), wraps it with SimpleFSDP
(`simple_fsdp.data_parallel(mode="fully_shard")` over a 1-D mesh named `fsdp`; with `replicas`,
HSDP's `hybrid_shard` over a 2-D mesh), annotates module
FQNs as GraphTrainer does, and traces `trainer.make_fwd_bwd_step(model, CrossEntropyLoss)` with
`make_fx_tracer.minimal_fx_tracer`: the joint forward+loss+backward graph GraphTrainer hands to
its pass list. `trace_llama3(n)` is `trace_model("llama3", n)`. It needs an initialized default
process group of `world` ranks: the fake one (`init_fake_world`) for tracing alone, or gloo for
running.

    python -m jointfx.titan [--model llama3] [--world 2] [--rank 0] [--layers 2] [--replicas 1]
                            [--out g.json] [--code]

prints a summary of the traced graph (placeholders, collectives, nodes), `--code` its Python
code, and `--out` writes it in the jointfx JSON format through `jointfx.export_graph`.

torchtitan is installed by scripts/setup from python/requirements-nodeps.txt (torchtitan 0.3.0
without its dependency list, plus what graph_trainer imports).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

BATCH = 2
SEQ_LEN = 32
SEED = 0


@dataclass
class TitanTrace:
    """A traced GraphTrainer step and what is needed to run it again on live state."""

    traced: Any  # make_fx_tracer.TracedResult
    model: torch.nn.Module  # the SimpleFSDP-wrapped model (DTensor parameters)
    mesh: Any  # the DeviceMesh: 1-D named "fsdp", or ("dp_replicate", "dp_shard") for HSDP
    n_layers: int
    args: tuple[Any, ...]  # the step's user inputs: (tokens, labels, global_valid_tokens, {})
    full_params: dict[str, torch.Tensor] = field(default_factory=dict)  # unsharded, by FQN
    family: str = "llama3"  # one of MODELS
    seq_base: int = -1  # the autograd sequence counter when tracing began (see export)

    @property
    def gm(self) -> torch.fx.GraphModule:
        return self.traced.gm

    def export(self, *, include_stack_trace: bool = False) -> dict[str, Any]:
        """The graph as a jointfx JSON document: header specs from the tracer (which
        placeholder is which parameter, which output its gradient), and graph meta naming the
        model and the world it was traced at (what `jointfx parity` and the tests read)."""
        import torch.distributed as dist

        from jointfx.export import export_graph, specs_from_traced

        world = dist.get_world_size()
        # export_graph adds the mesh, from the graph's DeviceMesh placeholders.
        meta = {"world_size": world, "traced_rank": dist.get_rank(),
                "model": {"family": self.family, "flavor": FLAVOR, "layers": self.n_layers,
                          "parameters": len(self.full_params),
                          "parameter_numel": sum(v.numel() for v in self.full_params.values()),
                          "tracer": "graph_trainer minimal_fx_tracer"}}
        doc = export_graph(self.gm, **specs_from_traced(self.traced, self.model),
                           graph_meta=meta, include_stack_trace=include_stack_trace)
        _renumber_seq_nr(doc, self.seq_base)
        return doc

    def bucket_plans(self) -> list[list[str] | str]:
        """GraphTrainer's default per-block buckets for this model."""
        from torchtitan.experiments.graph_trainer.common_utils import (
            get_default_transformer_block_buckets,
        )

        return get_default_transformer_block_buckets(self.n_layers)


def init_fake_world(world: int = 2, rank: int = 0) -> None:
    """Initializes torch.distributed with the fake process group (no communication): what
    tracing needs, on one process, for any world size."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)


# The graph_trainer model families this module can build: each is a subpackage of
# torchtitan.experiments.graph_trainer with a `model_registry(flavor, attn_backend=...)`.
MODELS = ("llama3", "qwen3", "deepseek_v3")
FLAVOR = "debugmodel"


def build_model(family: str = "llama3", n_layers: int = 2, seed: int = SEED) -> torch.nn.Module:
    """The `family`'s debugmodel with its first `n_layers` layers, SDPA attention, initialized
    from `seed` on CPU."""
    import importlib

    if family not in MODELS:
        raise ValueError(f"unknown model family {family!r}; known: {', '.join(MODELS)}")
    registry = importlib.import_module(f"torchtitan.experiments.graph_trainer.{family}")
    cfg = registry.model_registry(FLAVOR, attn_backend="sdpa").model
    if n_layers > len(cfg.layers):
        raise ValueError(f"{family} {FLAVOR} has {len(cfg.layers)} layers, not {n_layers}")
    cfg.layers = list(cfg.layers[:n_layers])
    torch.manual_seed(seed)
    model = cfg.build()
    model.init_states()
    return model


def build_llama3(n_layers: int = 2, seed: int = SEED) -> torch.nn.Module:
    """torchtitan's llama3 debugmodel (dim 256, vocab 2048) with `n_layers` layers, SDPA
    attention, initialized from `seed` on CPU."""
    return build_model("llama3", n_layers, seed)


def _vocab_size(model: torch.nn.Module) -> int:
    # The token embedding is the model's one nn.Embedding in every family built here; asking the
    # module rather than a parameter name keeps this independent of FQNs.
    embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    if len(embeddings) != 1:
        raise RuntimeError(f"expected one token embedding, found {len(embeddings)}")
    return embeddings[0].num_embeddings


def trace_model(family: str = "llama3", n_layers: int = 2, *, seed: int = SEED,
                batch: int = BATCH, seq_len: int = SEQ_LEN, replicas: int = 1) -> TitanTrace:
    """Traces GraphTrainer's fwd+loss+bwd step of the shrunk `family` model under SimpleFSDP
    over the initialized default group: every rank of it forms the `fsdp` mesh, or with
    `replicas` > 1 HSDP (`hybrid_shard`) on a (replicas, world / replicas) mesh named
    (`dp_replicate`, `dp_shard`): parameters sharded within a replica, gradients then
    all-reduced across replicas; `replicas` = world: DDP (`replicate`, as torchtitan's
    dp_shard 1), every parameter whole on every rank, gradients all-reduced."""
    import torch.distributed as dist
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.experiments.graph_trainer.make_fx_tracer import minimal_fx_tracer
    from torchtitan.experiments.graph_trainer.trainer import make_fwd_bwd_step

    world = dist.get_world_size()
    model, mesh, full = _fsdp_model(family, n_layers, seed, replicas)
    loss_fn = CrossEntropyLoss(CrossEntropyLoss.Config())
    args = (*step_inputs(_vocab_size(model), world, seed=seed, batch=batch, seq_len=seq_len), {})
    step = make_fwd_bwd_step(model, loss_fn)
    seq_base = torch.autograd._get_sequence_nr()
    traced = minimal_fx_tracer(step, module=model)(*args)
    return TitanTrace(traced, model, mesh, n_layers, args, full, family, seq_base)


def fsdp_model(family: str = "llama3", n_layers: int = 2, *, seed: int = SEED,
               replicas: int = 1) -> torch.nn.Module:
    """The shrunk `family` model as GraphTrainer trains it: SimpleFSDP over the initialized
    default group (HSDP with `replicas` > 1), tied weights tied again, this rank's shards of the
    `seed` initialization, module FQNs annotated for the tracer. What trace_model traces."""
    return _fsdp_model(family, n_layers, seed, replicas)[0]


def _fsdp_model(family: str, n_layers: int, seed: int, replicas: int
                ) -> tuple[torch.nn.Module, Any, dict[str, torch.Tensor]]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torchtitan.experiments.graph_trainer.common_utils import annotate_module_fqns
    from torchtitan.experiments.graph_trainer import simple_fsdp
    from torchtitan.experiments.graph_trainer.simple_fsdp import data_parallel

    # SimpleFSDP caches its wrapper class per module class, and the class's parameter properties
    # call the parametrization of the first model wrapped: a second model on another mesh
    # (HSDP after FSDP, in one process) would run the first one's collectives.
    simple_fsdp._wrap_class_cache.clear()
    world = dist.get_world_size()
    model = build_model(family, n_layers, seed)
    # named_parameters() lists a tied weight once, under its first FQN; set_local_shards walks
    # the same deduplicated list, so a tied weight is sharded once.
    full = {k: v.detach().clone() for k, v in model.named_parameters()}
    tied = _tied_aliases(model)
    if replicas < 1 or world % replicas:
        raise ValueError(f"replicas={replicas} does not divide the world of {world} ranks")
    if replicas == 1:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
        model = data_parallel(model, mesh, mode="fully_shard")
    elif replicas == world:  # as torchtitan's dp_shard 1: DDP
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp_replicate",))
        model = data_parallel(model, mesh, mode="replicate")
    else:
        mesh = init_device_mesh("cpu", (replicas, world // replicas),
                                mesh_dim_names=("dp_replicate", "dp_shard"))
        model = data_parallel(model, mesh, mode="hybrid_shard")
    _retie(model, tied)
    shards = world // replicas
    set_local_shards(model, full, dist.get_rank() % shards, shards)
    annotate_module_fqns(model)
    return model, mesh, full


def _renumber_seq_nr(doc: dict[str, Any], seq_base: int) -> None:
    """Makes the document's seq_nr independent of what the process traced before: the tracer
    copies autograd's per-thread sequence counter, which keeps growing across traces. Values
    below `seq_base` (no autograd node of this trace) become -1, the rest 0, 1, ... in
    ascending order, which keeps every forward/backward pairing and the order."""
    nodes = doc["nodes"]
    values = sorted({n["meta"]["seq_nr"] for n in nodes if "meta" in n
                     and isinstance(n["meta"].get("seq_nr"), int)
                     and n["meta"]["seq_nr"] >= seq_base})
    renumber = {v: i for i, v in enumerate(values)}
    for n in nodes:
        seq = n.get("meta", {}).get("seq_nr")
        if isinstance(seq, int):
            n["meta"]["seq_nr"] = renumber.get(seq, -1)


def _tied_aliases(model: torch.nn.Module) -> list[tuple[str, str]]:
    """(alias FQN, owner FQN) for every parameter reachable under more than one FQN (tied
    weights, e.g. an embedding shared with the output projection); the owner is the FQN
    named_parameters() keeps."""
    owner: dict[int, str] = {}
    aliases = []
    for fqn, p in model.named_parameters(remove_duplicate=False):
        if id(p) in owner:
            aliases.append((fqn, owner[id(p)]))
        else:
            owner[id(p)] = fqn
    return aliases


def _retie(model: torch.nn.Module, aliases: list[tuple[str, str]]) -> None:
    """Points each alias at its owner's (now sharded) parameter again: SimpleFSDP replaces every
    module's parameters with its own DTensor, which unties them, and the trainer re-ties after
    parallelizing (the model's init_states does), so the traced step sees one parameter under
    both FQNs and returns a gradient for each."""
    def slot(fqn: str) -> tuple[torch.nn.Module, str]:
        path, _, name = fqn.rpartition(".")
        return model.get_submodule(path), name

    # Through _parameters: under SimpleFSDP the attribute is a property returning the gathered
    # tensor, not the sharded Parameter.
    for alias, owner in aliases:
        (om, on), (am, an) = slot(owner), slot(alias)
        am._parameters[an] = om._parameters[on]


def step_inputs(vocab: int, world: int, *, seed: int = SEED, batch: int = BATCH,
                seq_len: int = SEQ_LEN) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The traced step's tensor inputs (tokens, labels, global_valid_tokens), from `seed` + 1:
    the same on every rank."""
    gen = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, vocab, (batch, seq_len), generator=gen)
    labels = torch.randint(0, vocab, (batch, seq_len), generator=gen)
    # The loss is a sum over tokens divided by the global count (GraphTrainer's convention).
    valid = torch.tensor(float(batch * seq_len * world))
    return tokens, labels, valid


def fixture_data(family: str, n_layers: int, world: int, seed: int = SEED
                 ) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...]]:
    """What `trace_model(family, n_layers, seed=seed)` on `world` ranks runs on: the full
    parameters and buffers by every FQN the graph names (a tied weight under each of its FQNs,
    as copies, since a safetensors file holds no shared tensors), and the step's tensor inputs."""
    model = build_model(family, n_layers, seed)
    state = {k: v.detach().clone().contiguous()
             for k, v in model.named_parameters(remove_duplicate=False)}
    state.update({k: v.detach().clone().contiguous() for k, v in model.named_buffers()})
    return state, step_inputs(_vocab_size(model), world, seed=seed)


def trace_llama3(n_layers: int = 2, *, seed: int = SEED, batch: int = BATCH,
                 seq_len: int = SEQ_LEN) -> TitanTrace:
    """`trace_model("llama3", ...)`."""
    return trace_model("llama3", n_layers, seed=seed, batch=batch, seq_len=seq_len)


def set_local_shards(model: torch.nn.Module, full: dict[str, torch.Tensor], rank: int,
                     world: int) -> None:
    """Sets every DTensor parameter's local shard to rows `rank` of `world` of its full value
    (Shard(0), torch.chunk's split), with no communication: under the fake group
    `distribute_tensor`'s scatter leaves the shards undefined."""
    with torch.no_grad():
        for fqn, p in model.named_parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            piece = full[fqn].chunk(world, dim=0)[rank]
            if tuple(piece.shape) != tuple(local.shape):
                raise RuntimeError(f"{fqn}: shard {tuple(local.shape)} vs rows "
                                   f"{tuple(piece.shape)} of {tuple(full[fqn].shape)}")
            local.copy_(piece)


def run_step(trace: TitanTrace, gm: torch.fx.GraphModule) -> list[torch.Tensor]:
    """Runs `gm` (the traced step, or a transform of it with the same signature) once on the
    model's live local shards and the trace's inputs; returns [loss, local gradients...] as
    plain tensors, in the order of the model's parameters."""
    from dataclasses import replace

    from torchtitan.experiments.graph_trainer.make_fx_tracer import run_traced

    outs = run_traced(replace(trace.traced, gm=gm), module=trace.model)(*trace.args)
    return [o.to_local() if hasattr(o, "to_local") else o for o in outs]


def sgd_update(model: torch.nn.Module, grads: list[torch.Tensor], lr: float = 0.5) -> None:
    """In place: local shard -= lr * local gradient, so the next step sees new parameters."""
    params = [p for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad]
    if len(params) != len(grads):
        raise RuntimeError(f"{len(grads)} gradients for {len(params)} parameters")
    with torch.no_grad():
        for p, g in zip(params, grads):
            (p.to_local() if hasattr(p, "to_local") else p).sub_(lr * g)


def summary(gm: torch.fx.GraphModule) -> dict[str, int]:
    """Counts of what a GraphTrainer graph holds."""
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    meshes = sum(1 for n in placeholders if not isinstance(n.meta.get("val"), torch.Tensor))

    def count(op: str) -> int:
        return sum(1 for n in nodes if n.op == "call_function" and op in str(n.target))

    return {"nodes": len(nodes), "placeholders": len(placeholders),
            "non_tensor_placeholders": meshes,
            "all_gather_into_tensor": count("all_gather_into_tensor"),
            "reduce_scatter_tensor": count("reduce_scatter_tensor"),
            "all_reduce": count("all_reduce"),
            "wait_tensor": count("wait_tensor")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=MODELS, default="llama3")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--replicas", type=int, default=1,
                   help="HSDP: replicas of a world / replicas-way sharded model (default 1: "
                   "FSDP; the world: DDP)")
    p.add_argument("--out", help="write the graph as jointfx JSON")
    p.add_argument("--code", action="store_true", help="print the graph's Python code")
    a = p.parse_args()
    torch.set_num_threads(1)
    init_fake_world(a.world, a.rank)
    tr = trace_model(a.model, a.layers, replicas=a.replicas)
    print(summary(tr.gm))
    if a.code:
        print(tr.gm.code)
    if a.out:
        from jointfx import write_graph

        # With the tracer's specs (TitanTrace.export): a bare export_graph(gm) has no parameter
        # inputs or gradient outputs, so jointfx finds no FSDP chain in it.
        write_graph(tr.export(), a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
