"""Models of real model libraries (Hugging Face transformers, timm, torchvision) through the tool chain.

The fixtures tests/data/traced/{hf_llama,hf_t5,hf_qwen3_moe,timm_vit,timm_convnext,timm_resnet18}_w2
.json are the libraries' own model classes, tiny and seeded (jointfx.models.real; written by
scripts/gen_fixtures.py, whose regeneration test_fixtures.py checks byte for byte). They are in
tests/data/traced/, so the C++ unit tests that load every fixture, test_edit_script.py, and the
runtime tests (the parity matrix `runtime.parity.<name>` and the executor against PyTorch,
`runtime.graphmodule.<name>`) run them too. Here, per family:

* the header and graph meta describe the library model, and building it touches no network;
* the file round-trips and its shapes re-propagate; one all-gather per parameter use in forward,
  one reduce-scatter per gather in backward, no dead gather (T5's `self.wo.weight.dtype` checks);
* `jointfx verify`, `stats` (no op unknown to the op table), `analyze` (the blocks);
* what each FSDP pass of configs/pipelines/default.json does: tag-fsdp finds one chain per
  gather, remat re-gathers in backward exactly what backward reads, bucket forms buckets, the
  estimated peak does not grow; where the default plan leaves collectives unbucketed for memory,
  an expected failure with the numbers (issue 46);
* configs/pipelines/auto.json under a memory limit stays within it;
* the traced graph computes the eager library model's loss and gradients (gloo, world 1 in
  process; world 2 on two ranks and the auto plan's parity are slow);
* torchvision's ResNet-18 at its full width is timm's network op for op (slow).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import fx

from conftest import REPO, fixture_variant, jfx_bin_path, propagate_fake, real_fixture_paths
from jointfx.export import dumps_graph, export_graph, grad_mode, import_graph, load_graph
from jointfx.models.real import (
    BATCH_SEED,
    REAL_CASES,
    REAL_FIXTURES,
    WEIGHT_SEED,
    eager_loss,
    flat_user_inputs,
    library_version,
    trace_real_case,
    user_inputs_by_name,
)

AG = "_c10d_functional.all_gather_into_tensor.default"
RS = "_c10d_functional.reduce_scatter_tensor.default"
WAIT = "_c10d_functional.wait_tensor.default"
DEFAULT_PIPELINE = REPO / "configs" / "pipelines" / "default.json"
AUTO_PIPELINE = REPO / "configs" / "pipelines" / "auto.json"

PATHS = real_fixture_paths()
IDS = [p.stem for p in PATHS]

# Parameters a family gathers more than once per step: T5's `shared` embedding is the weight of
# encoder.embed_tokens, decoder.embed_tokens and (tied) lm_head, each of which gathers it when
# called; every other parameter once.
GATHERS = {"hf_t5": {"shared.weight": 3},
           "hf_whisper": {"model.decoder.embed_tokens.weight": 2}}  # tied with proj_out

# Families whose default plan leaves collectives unbucketed for memory (`bucket.unbucketed.memory`,
# measured here): issue 46, the default pipeline's bound is the input's own estimated peak, which
# the leanest (traced) order already sits at, so per-block buckets do not fit under it.


def _have_libraries() -> bool:
    try:
        import timm  # noqa: F401
        import torchvision  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="session")
def libraries() -> None:
    """transformers, timm and torchvision (python/requirements-nodeps.txt): skips without them,
    fails in CI, where scripts/setup installs them."""
    if not _have_libraries():
        if os.environ.get("CI") == "true":
            pytest.fail("transformers/timm/torchvision are not installed: run scripts/setup")
        pytest.skip("transformers/timm/torchvision are not installed: run scripts/setup")


@pytest.fixture(scope="module", params=PATHS, ids=IDS)
def fixture(request: pytest.FixtureRequest) -> tuple[Path, dict[str, Any]]:
    path: Path = request.param
    return path, json.loads(path.read_text(encoding="utf-8"))


def _family(path: Path) -> str:
    return fixture_variant(path)


def _refs(value: Any) -> list[str]:
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    if isinstance(value, dict):
        if set(value) == {"node"}:
            return [value["node"]]
        return [r for v in value.values() for r in _refs(v)]
    return []


def _users(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    users: dict[str, list[dict[str, Any]]] = {n["name"]: [] for n in doc["nodes"]}
    for n in doc["nodes"]:
        for r in _refs([n["args"], n["kwargs"]]):
            users[r].append(n)
    return users


def _of(doc: dict[str, Any], target: str, phase: str | None = None) -> list[dict[str, Any]]:
    return [n for n in doc["nodes"] if n["target"] == target
            and (phase is None or n["meta"].get("phase") == phase)]


def _source_placeholder(by_name: dict[str, dict[str, Any]], node: dict[str, Any]) -> str | None:
    cur = by_name[node["args"][0]["node"]]
    while cur["op"] != "placeholder":
        refs = set(_refs([cur["args"], cur["kwargs"]]))
        if len(refs) != 1:
            return None
        cur = by_name[refs.pop()]
    return cur["name"]


# ----------------------------------------------------------------------------- the fixture set


def test_every_real_fixture_is_committed_and_small() -> None:
    assert sorted(p.stem for p in PATHS) == sorted(f"{c}_w{w}" for c, w in REAL_FIXTURES)
    assert {c for c, _ in REAL_FIXTURES} == set(REAL_CASES)
    libraries = {case.library for case in REAL_CASES.values()}
    assert libraries == {"transformers", "timm"}
    for path in PATHS:
        assert path.stat().st_size < 500_000, path.name  # tests/data stays small


class _NoNetwork:
    """Makes every socket connection fail while active, naming where it was going."""

    def __enter__(self) -> _NoNetwork:
        self._connect = socket.socket.connect
        self.attempts: list[Any] = []

        def refuse(sock: socket.socket, address: Any) -> None:
            self.attempts.append(address)
            raise OSError(f"test_real_models: network access to {address!r}")

        socket.socket.connect = refuse  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        socket.socket.connect = self._connect  # type: ignore[method-assign]


def test_header_and_meta_describe_the_library_model(fixture: tuple[Path, dict[str, Any]],
                                                    libraries: None) -> None:
    """The graph's inputs are the library model's parameters and buffers by FQN, then the
    batch's tensors by name (keyword inputs by their key); meta names the library class, its
    pinned version and the config. Building the model makes no network connection."""
    path, doc = fixture
    case = REAL_CASES[_family(path)]
    with _NoNetwork() as guard:
        model = case.build(WEIGHT_SEED)
    assert guard.attempts == []
    batch = case.batch(BATCH_SEED)
    params = list(model.named_parameters())
    buffers = list(model.named_buffers())
    named_inputs = user_inputs_by_name(case, batch)
    world = doc["meta"]["world_size"]
    assert world == 2
    assert type(model).__module__.split(".")[0] == case.library

    kinds = [i["kind"] for i in doc["inputs"]]
    assert kinds == (["parameter"] * len(params) + ["buffer"] * len(buffers)
                     + ["user_input"] * len(named_inputs))
    assert [i.get("fqn") for i in doc["inputs"][:len(params) + len(buffers)]] == \
        [n for n, _ in params] + [n for n, _ in buffers]
    assert [i["name"] for i in doc["inputs"][len(params) + len(buffers):]] == \
        [n for n, _ in named_inputs]
    # A gradient for every trainable parameter; a frozen one (requires_grad=False) has none.
    assert doc["outputs"] == [{"kind": "loss"}] + [{"fqn": n, "kind": "gradient"}
                                                    for n, p in params if p.requires_grad]
    frozen = [n for n, p in params if not p.requires_grad]
    assert doc["meta"]["model"].get("frozen_parameters", []) == frozen
    m = doc["meta"]["model"]
    assert (m["class"], m["module"]) == (type(model).__qualname__, type(model).__module__)
    assert m["parameters"] == len(params) and m["buffers"] == len(buffers)
    assert m["parameter_numel"] == sum(p.numel() for _, p in params)
    assert m["config"] == {**case.config, "version": library_version(case.library)}
    assert m["training"] is True and m["aux_losses"] == 0
    if case.loss_fn is None:  # Hugging Face: everything by keyword, the model's own loss
        assert m["targets"] == [] and [i["name"] for i in m["inputs"]] == list(batch[0])
    by_name = {n["name"]: n for n in doc["nodes"]}
    for spec, (fqn, p) in zip(doc["inputs"], params):
        rows = -(-p.shape[0] // world)
        assert by_name[spec["name"]]["meta"]["val"]["shape"] == [rows, *p.shape[1:]], fqn


def test_roundtrip_and_fake_propagation(fixture: tuple[Path, dict[str, Any]]) -> None:
    path, doc = fixture
    gm = import_graph(doc)
    assert dumps_graph(export_graph(gm)) == path.read_text(encoding="utf-8")
    pairs = propagate_fake(gm)
    for name, want, got in pairs:
        assert (tuple(got.shape), got.dtype) == (tuple(want.shape), want.dtype), name
    assert len(pairs) > len(doc["nodes"]) // 2
    order = ["forward", "loss", "backward"]
    phases = [n["meta"]["phase"] for n in doc["nodes"] if n["op"] == "call_function"]
    assert phases == sorted(phases, key=order.index) and set(phases) == set(order)


def test_fsdp_collectives(fixture: tuple[Path, dict[str, Any]]) -> None:
    """Each parameter gathered once per owning-module call in forward, every gather used (no
    dead chain from a metadata-only read), one reduce-scatter per gather in backward."""
    path, doc = fixture
    by_name = {n["name"]: n for n in doc["nodes"]}
    users = _users(doc)
    params = {i["name"]: i["fqn"] for i in doc["inputs"] if i["kind"] == "parameter"}
    gathered: Counter[str] = Counter()
    for ag in _of(doc, AG):
        assert ag["meta"]["phase"] == "forward" and ag["args"][1:] == [2, "0"]
        src = _source_placeholder(by_name, ag)
        assert src in params, ag["name"]
        gathered[params[src]] += 1
        (wait,) = users[ag["name"]]
        assert wait["target"] == WAIT and users[wait["name"]], f"dead gather {ag['name']}"
    expected = Counter({fqn: 1 for fqn in params.values()})
    expected.update({k: v - 1 for k, v in GATHERS.get(_family(path), {}).items()})
    assert gathered == expected
    # One reduce-scatter per gather of a trainable parameter; none for a frozen one.
    frozen = set(doc["meta"]["model"].get("frozen_parameters", []))
    assert len(_of(doc, RS, "backward")) == len(_of(doc, RS)) == sum(
        n for fqn, n in expected.items() if fqn not in frozen)


def test_family_specifics(fixture: tuple[Path, dict[str, Any]]) -> None:
    path, doc = fixture
    family = _family(path)
    counts = Counter(n["target"] for n in doc["nodes"])
    params = [i["fqn"] for i in doc["inputs"] if i["kind"] == "parameter"]
    fqns = {n["meta"].get("custom", {}).get("module_fqn") for n in doc["nodes"]}
    by_name = {n["name"]: n for n in doc["nodes"]}
    if family == "hf_llama":
        # transformers' SDPA path with a padding mask, RoPE from a buffer, the model's loss.
        assert counts["aten._scaled_dot_product_flash_attention_for_cpu.default"] == 2
        assert {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj",
                "model.norm", "lm_head"} <= fqns
        buffers = [i["fqn"] for i in doc["inputs"] if i["kind"] == "buffer"]
        assert buffers == ["model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"]
        assert counts["aten.nll_loss_forward.default"] == 1
        assert not any(n["op"] == "get_attr" for n in doc["nodes"])  # no KV cache (use_cache=False)
    elif family == "hf_t5":
        # T5DenseActDense reads self.wo.weight.dtype before calling wo: 4 blocks, one gather of
        # each wo.weight (its call), none for the reads.
        wo = [ag for ag in _of(doc, AG)
              if _source_placeholder(by_name, ag).endswith("_dense_relu_dense_wo_weight")]
        assert len(wo) == 4
        assert {"encoder.block.0.layer.0.SelfAttention.q",
                "decoder.block.1.layer.1.EncDecAttention.k",
                "decoder.block.0.layer.2.DenseReluDense.wo", "encoder.final_layer_norm"} <= fqns
        assert params[0] == "shared.weight" and "lm_head.weight" not in params
        # Attention by SDPA: the 4 self-attentions add the learned relative position bias to
        # the mask (a mask that needs a gradient takes SDPA's math path: bmm, _safe_softmax),
        # the 2 cross-attentions only the padding mask (the flash kernel).
        assert counts["aten.bmm.default"] > 0 and counts["aten._safe_softmax.default"] == 4
        flash = _of(doc, "aten._scaled_dot_product_flash_attention_for_cpu.default")
        assert [f["meta"]["custom"]["module_fqn"] for f in flash] == [
            f"decoder.block.{i}.layer.1.EncDecAttention" for i in range(2)]
    elif family == "hf_qwen3_moe":
        # Routing by sort/histc/cumsum, experts by grouped matmuls over 3-D expert weights, and
        # the router's load-balancing loss inside the model's loss.
        for op in ("aten._grouped_mm.default", "aten.histc.default", "aten.sort.default",
                   "aten.cumsum.default", "aten.topk.default", "aten.index_put_.default"):
            assert counts[op] > 0, op
        experts = by_name["model_layers_0_mlp_experts_gate_up_proj"]["meta"]["val"]["shape"]
        assert len(experts) == 3 and experts[0] == 4 // 2  # 4 experts sharded over 2 ranks
        assert counts["aten.scatter_add_.default"] == 2  # the aux loss's expert counts
    elif family == "timm_vit":
        assert {"cls_token", "pos_embed", "blocks.0.attn.qkv.weight", "head.weight"} <= set(params)
        assert counts["aten._scaled_dot_product_flash_attention_for_cpu.default"] == 2
        assert counts["aten.convolution.default"] == 1
    elif family == "timm_convnext":
        convs = _of(doc, "aten.convolution.default")
        depthwise = [c for c in convs if c["args"][8] > 1]  # groups = channels
        assert len(depthwise) == 5 and all(c["args"][4] == [3, 3] for c in depthwise)
        assert "stages.1.blocks.1.gamma" in params
        assert counts["aten.native_layer_norm.default"] == 10
    elif family == "timm_resnet18":
        # ResNet-18: the stem, 8 BasicBlocks of two convs, downsample shortcuts in stages 2-4.
        assert counts["aten.convolution.default"] == 1 + 16 + 3
        assert counts["aten.native_batch_norm.default"] == 1 + 16 + 3
        assert counts["aten.max_pool2d_with_indices.default"] == 1
        buffers = [i["fqn"] for i in doc["inputs"] if i["kind"] == "buffer"]
        assert len(buffers) == 20 * 3 and buffers[:3] == [
            "bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"]
        assert {"layer2.0.downsample.0", "layer4.1.conv2", "fc"} <= fqns
        assert "layer1.0.downsample.0" not in fqns
    elif family == "hf_whisper":
        # Conv1d stem over log-mel frames, the encoder's sinusoidal positions frozen by
        # transformers (gathered, never reduce-scattered), a decoder with cross-attention.
        assert counts["aten.convolution.default"] == 2
        assert doc["meta"]["model"]["frozen_parameters"] == ["model.encoder.embed_positions.weight"]
        assert {"model.encoder.layers.1.self_attn.q_proj", "model.decoder.layers.0.encoder_attn",
                "proj_out"} <= fqns
        assert "model.encoder.embed_positions.weight" in params
    elif family == "hf_lora_llama":
        # Every pretrained weight frozen, LoRA adapters (2 layers x q_proj, v_proj x A, B) trained.
        trained = [o["fqn"] for o in doc["outputs"] if o["kind"] == "gradient"]
        assert len(trained) == 8 and all(f.endswith(("lora_a", "lora_b")) for f in trained)
        assert len(doc["meta"]["model"]["frozen_parameters"]) == len(params) - 8
        assert "model.layers.1.self_attn.v_proj.base" in fqns
    else:
        pytest.fail(f"no checks for {family}")


# ----------------------------------------------------------------------------- the CLI


def _run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(jfx_bin_path()), *map(str, args)], capture_output=True,
                          text=True, timeout=600)
    if check:
        assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def _stats(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and "." in key and " " not in key:
            out[key] = int(value)
    return out


@functools.lru_cache(maxsize=None)
def _analyze(path: Path) -> dict[str, Any]:
    return json.loads(_run("analyze", path, "--json").stdout)


@functools.lru_cache(maxsize=None)
def _optimized(path: Path, pipeline: str, out_dir: Path, *sets: str) -> tuple[Path, dict[str, int]]:
    """`jointfx opt` of a fixture: (the output file, the --stats figures)."""
    out = out_dir / f"{path.stem}.{abs(hash((pipeline, sets)))}.json"
    args: list[str | Path] = ["opt", path, "-p", pipeline, "-o", out, "--stats"]
    for s in sets:
        args += ["--set", s]
    proc = _run(*args)
    return out, _stats(proc.stdout + proc.stderr)


@pytest.fixture(scope="session")
def opt_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("real_opt")


def test_cli_verify_and_stats(fixture: tuple[Path, dict[str, Any]], jfx_bin: Path) -> None:
    path, doc = fixture
    assert "ok" in _run("verify", path).stdout
    stats = json.loads(_run("stats", "--json", path).stdout)
    assert stats["unknown_targets"] == {}, "a target torch's registry does not have"


BLOCKS = {
    "hf_llama": [f"model.layers.{i}" for i in range(2)],
    "hf_qwen3_moe": [f"model.layers.{i}" for i in range(2)],
    "hf_lora_llama": [f"model.layers.{i}" for i in range(2)],
    "hf_whisper": [f"model.{part}.layers.{i}" for part in ("encoder", "decoder") for i in range(2)],
    "hf_t5": ["encoder.block.0", "encoder.block.1", "decoder.block.0", "decoder.block.1"],
    "timm_vit": ["blocks.0", "blocks.1"],
    "timm_resnet18": [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)],
    # The units a user would wrap (issue 46 item 4): each stage's blocks, not the stem's conv and
    # norm as two repeated blocks, nor a stage's downsample beside its own blocks.
    "timm_convnext": ["stages.0.blocks.0", "stages.1.blocks.0", "stages.1.blocks.1",
                      "stages.2.blocks.0", "stages.3.blocks.0"],
}


def test_block_analysis(fixture: tuple[Path, dict[str, Any]], jfx_bin: Path) -> None:
    path, _ = fixture
    names = [b["name"] for b in _analyze(path)["blocks"]["blocks"]]
    assert names == BLOCKS[_family(path)]


def _read_in_backward(gather: fx.Node) -> bool:
    """Whether backward reads the gathered parameter (through its wait and views)."""
    from jointfx.trace import _is_view

    wait = torch.ops._c10d_functional.wait_tensor.default
    todo, seen = [gather], set()
    while todo:
        n = todo.pop()
        for user in n.users:
            if user.meta.get("phase") == "backward":
                return True
            if user not in seen and (user.target is wait or _is_view(user)):
                seen.add(user)
                todo.append(user)
    return False


def test_remat_regathers_what_backward_reads(fixture: tuple[Path, dict[str, Any]],
                                            jfx_bin: Path, opt_dir: Path) -> None:
    """With every chain resharded, remat re-gathers in backward exactly the gathers whose value
    backward reads (counted on the traced graph, independently of the passes)."""
    path, doc = fixture
    gm = import_graph(doc)
    gathers = [n for n in gm.graph.nodes
               if n.target is torch.ops._c10d_functional.all_gather_into_tensor.default]
    wanted = sum(_read_in_backward(n) for n in gathers)
    assert 0 < wanted < len(gathers)  # the embedding / input layers' backward reads no weight
    out, stats = _optimized(path, "tag-fsdp{reshard=always},remat", opt_dir)
    assert stats["tag-fsdp.chains-resharded"] == len(gathers)
    after = json.loads(out.read_text())
    assert len(_of(after, AG, "backward")) == wanted
    assert len(_of(after, AG, "forward")) == len(gathers)


def test_default_pipeline_does_the_fsdp_work(fixture: tuple[Path, dict[str, Any]],
                                             jfx_bin: Path, opt_dir: Path) -> None:
    """configs/pipelines/default.json: tag-fsdp finds every gather as a chain and reshards some,
    remat re-gathers those in backward, bucket forms all-gather and reduce-scatter buckets, and
    the estimated peak does not grow; the output verifies with the same header."""
    path, doc = fixture
    n_gathers = len(_of(doc, AG))
    out, stats = _optimized(path, str(DEFAULT_PIPELINE), opt_dir)
    assert stats["tag-fsdp.chains-kept"] + stats["tag-fsdp.chains-resharded"] == n_gathers
    assert stats["tag-fsdp.chains-resharded"] > 0 and stats["tag-fsdp.blocks"] > 0
    assert stats["remat.nodes-cloned"] > 0
    assert stats["bucket.buckets.all_gather"] > 0 and stats["bucket.buckets.reduce_scatter"] > 0
    assert stats["bucket.collectives-after"] < stats["bucket.collectives-before"]
    after = json.loads(out.read_text())
    assert _of(after, AG, "backward")  # the re-gathers, bucketed
    assert after["inputs"] == doc["inputs"] and after["outputs"] == doc["outputs"]
    _run("verify", out)
    assert _analyze(out)["memory"]["peak_bytes"] <= _analyze(path)["memory"]["peak_bytes"]


def test_default_plan_buckets_every_collective(fixture: tuple[Path, dict[str, Any]],
                                               jfx_bin: Path, opt_dir: Path) -> None:
    """The default plan leaves no collective unbucketed for memory: its bound is the reference
    plan's peak (FSDP2's per-unit buckets), so per-block buckets form on every model (before that
    bound ViT left 20 of 73 collectives unbucketed, ConvNeXt 58 of 163, ResNet-18 61 of 160)."""
    path, _ = fixture
    _, stats = _optimized(path, str(DEFAULT_PIPELINE), opt_dir)
    assert stats.get("bucket.unbucketed.memory", 0) == 0


def _auto(path: Path, opt_dir: Path) -> tuple[Path, dict[str, int], int]:
    """auto.json with the memory limit at the default plan's estimated peak."""
    default_out, _ = _optimized(path, str(DEFAULT_PIPELINE), opt_dir)
    limit = _analyze(default_out)["memory"]["peak_bytes"]
    out, stats = _optimized(path, str(AUTO_PIPELINE), opt_dir, f"memory-limit={limit}")
    return out, stats, limit


def test_auto_pipeline_under_a_memory_limit(fixture: tuple[Path, dict[str, Any]], jfx_bin: Path,
                                            opt_dir: Path) -> None:
    """The planner with a limit below the input's peak (the default plan's): it reshards, picks
    a bucket plan and a prefetch distance, and the estimated peak of its output is within the
    limit."""
    path, doc = fixture
    out, stats, limit = _auto(path, opt_dir)
    assert limit < _analyze(path)["memory"]["peak_bytes"]
    assert stats["tag-fsdp.chains-resharded"] > 0
    assert "bucket.auto-plan" in stats and "schedule.auto-prefetch" in stats
    assert stats["bucket.memory-peak-estimate"] <= limit
    assert stats["schedule.memory-peak-estimate"] <= limit
    _run("verify", out)
    assert _analyze(out)["memory"]["peak_bytes"] <= limit
    after = json.loads(out.read_text())
    assert after["inputs"] == doc["inputs"] and after["outputs"] == doc["outputs"]


def test_inprocess_default_pipeline_on_a_fresh_trace(jfx_bin: Path, opt_dir: Path) -> None:
    """jointfx.trace of the Hugging Face Llama by keyword goes straight into run_pipeline with
    no other argument and does the same FSDP work as the CLI on the committed fixture."""
    pytest.importorskip("jointfx._C", reason="jointfx._C not built (scripts/build builds it)")
    if not _have_libraries():
        pytest.skip("transformers/timm/torchvision are not installed: run scripts/setup")
    import warnings

    from jointfx import run_pipeline

    with _fake_world(2):
        traced = trace_real_case("hf_llama", 2)
        assert dumps_graph(traced.export()) == (
            REPO / "tests" / "data" / "traced" / "hf_llama_w2.json").read_text()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            gm = run_pipeline(traced.gm, str(DEFAULT_PIPELINE), strict=True)
    got = {f"{p['name']}.{k}": v for p in gm.meta["jointfx_report"]["passes"]
           for k, v in p["stats"].items()}
    fixture_path = REPO / "tests" / "data" / "traced" / "hf_llama_w2.json"
    _, want = _optimized(fixture_path, str(DEFAULT_PIPELINE), opt_dir)
    assert {k: got[k] for k in want} == want
    backward = [n for n in gm.graph.nodes
                if n.target is torch.ops._c10d_functional.all_gather_into_tensor.default
                and n.meta.get("autograd_backward")]
    assert backward


class _fake_world:
    """A fake process group of `world` ranks, then whatever world was there before."""

    def __init__(self, world: int) -> None:
        self.world = world

    def __enter__(self) -> None:
        import torch.distributed as dist

        from jointfx.trace import init_fake_world

        self.before = (dist.get_backend(), dist.get_world_size()) if dist.is_initialized() else None
        init_fake_world(self.world)

    def __exit__(self, *exc: object) -> None:
        import torch.distributed as dist

        from jointfx.trace import init_fake_world

        dist.destroy_process_group()
        if self.before is not None and self.before[0] == "fake":
            init_fake_world(self.before[1])
        elif self.before is not None:
            store = dist.TCPStore("127.0.0.1", 0, 1, True)
            dist.init_process_group(self.before[0], store=store, rank=0, world_size=1)


# ----------------------------------------------------------------------------- numerics


@pytest.mark.parametrize("name", sorted(REAL_CASES))
def test_traced_graph_matches_eager(name: str, libraries: None, gloo_world1: None) -> None:
    """World 1 on a real gloo group: the traced graph's loss and gradients are the eager library
    model's (which computes its own loss for Hugging Face models, the MoE's router loss
    included), its BatchNorm buffer updates too; export -> import keeps every bit."""
    case = REAL_CASES[name]
    traced = trace_real_case(name)
    model = case.build(WEIGHT_SEED)
    batch = case.batch(BATCH_SEED)
    real = traced.real_inputs(model, flat_user_inputs(batch))
    n_params, n_buffers = len(traced.layouts), len(traced.buffer_fqns)
    graph_buffers = real[n_params:n_params + n_buffers]
    reimported = import_graph(json.loads(dumps_graph(traced.export())))
    again = [t.clone() for t in real]
    with grad_mode(traced.gm), torch.no_grad():
        got = list(traced.gm(*real))
        other = list(reimported(*again))
    for a, b in zip(got, other):
        assert torch.equal(a, b)
    loss = eager_loss(case, model, batch)
    trained = [lay for lay in traced.layouts if lay.trainable]  # frozen ones have no output
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(loss, [params[lay.fqn] for lay in trained])
    torch.testing.assert_close(got[0], loss.detach(), rtol=1e-5, atol=1e-6)
    assert len(got) == 1 + len(trained)
    for lay, g, want in zip(trained, got[1:], grads):
        torch.testing.assert_close(g, want, rtol=1e-5, atol=1e-6,
                                   msg=lambda m, f=lay.fqn: f"{f}: {m}")
    named = dict(model.named_buffers())
    for fqn, value in zip(traced.buffer_fqns, graph_buffers):
        torch.testing.assert_close(value, named[fqn], msg=lambda m, f=fqn: f"{f}: {m}")
    if name == "timm_resnet18":  # the running statistics really moved
        assert not torch.equal(named["bn1.running_mean"], torch.zeros_like(named["bn1.running_mean"]))
    if name == "hf_qwen3_moe":  # the router's loss is in the graph's loss, and big enough to tell
        with torch.no_grad():
            out = model(**batch[0])
        assert out["aux_loss"] is not None
        aux = model.config.router_aux_loss_coef * out["aux_loss"]
        assert aux.abs() > 100 * (1e-6 + 1e-5 * loss.abs())


@pytest.mark.slow
def test_world2_fixtures_match_eager_on_gloo_ranks(libraries: None,
                                                   tmp_path: Path) -> None:
    """Each committed world-2 fixture on two real gloo ranks (one process each, the same batch
    on both): every rank's loss is the eager model's and every gradient shard is 2 x the eager
    gradient's rows (test_multirank.py's worker)."""
    from test_multirank import _launch

    names = [p.stem for p in PATHS]
    per_rank = _launch(2, names, tmp_path)
    for name in names:
        results = [r[name] for r in per_rank]
        assert len({r["loss"] for r in results}) == 1, (name, results)
        for r in results:
            assert r["loss_err"] <= r["tol"] and r["max_grad_err"] <= r["tol"], (name, r)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_auto_plan_keeps_parity(path: Path, jfx_bin: Path, opt_dir: Path) -> None:
    """`jointfx parity` of the fixture against the auto plan under its memory limit: bitwise
    loss and gradients (and BatchNorm buffers) on 2 gloo ranks over 3 AdamW steps. The default
    pipeline's parity is in the runtime parity matrix (ctest runtime.parity.<fixture>)."""
    out, _, _ = _auto(path, opt_dir)
    proc = _run("parity", path, out, "--nproc", "2", "--steps", "3", "--optimizer", "adamw",
                "--lr", "0.01", check=False)
    assert proc.returncode == 0 and "bitwise identical" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.slow
def test_torchvision_resnet18_is_timms_network(libraries: None, gloo_world1: None) -> None:
    """torchvision's resnet18 at its full width (11 M parameters; its widths are fixed, so the
    fixture is timm's narrow one): the traced graph computes eager's loss and gradients, and has
    timm's op for op (the same targets, as many of each)."""
    import torchvision

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = torchvision.models.resnet18(num_classes=5).train()
    gen = torch.Generator().manual_seed(1)
    images, labels = torch.randn(4, 3, 32, 32, generator=gen), torch.randint(0, 5, (4,), generator=gen)
    traced = trace_real_case("timm_resnet18", model=model)  # timm's batch and loss, this model
    real = traced.real_inputs(model, [images, labels])
    with grad_mode(traced.gm), torch.no_grad():
        got = list(traced.gm(*real))
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    torch.testing.assert_close(got[0], loss.detach(), rtol=1e-5, atol=1e-6)
    for lay, g, want in zip(traced.layouts, got[1:], grads):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, f=lay.fqn: f"{f}: {m}")
    ours = Counter(n["target"] for n in traced.export()["nodes"] if n["op"] == "call_function")
    doc = load_graph(REPO / "tests" / "data" / "traced" / "timm_resnet18_w2.json")
    timm = Counter(n["target"] for n in doc["nodes"] if n["op"] == "call_function")
    # At world 1 nothing pads (the fixture's fc.weight/bias of 5 rows pad at world 2).
    timm["aten.slice.Tensor"] -= 2
    timm["aten.constant_pad_nd.default"] -= 2
    assert ours == +timm


# ----------------------------------------------------------------------------- frozen parameters


@pytest.mark.parametrize("name", ["hf_whisper", "hf_lora_llama"])
@pytest.mark.parametrize("pipeline", ["none", "default"])
def test_frozen_parameters_stay_frozen(name: str, pipeline: str, libraries: None,
                                       tmp_path: Path) -> None:
    """requires_grad=False parameters (Whisper's encoder position embedding, which transformers
    freezes; every pretrained weight of the LoRA model): gathered in forward as FSDP gathers
    them, but no gradient output, no reduce-scatter, no optimizer state, and on 2 gloo ranks
    over 3 AdamW steps (the traced graph, and the default plan's) bit-identical, while every
    trainable parameter moves. Before, Whisper's frozen weight got a gradient and one SGD step
    changed it by 1.4e-4."""
    from safetensors.torch import load_file

    from jointfx.reference import write_fixture_data

    path = REPO / "tests" / "data" / "traced" / f"{name}_w2.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    frozen = set(doc["meta"]["model"]["frozen_parameters"])
    params = [i["fqn"] for i in doc["inputs"] if i["kind"] == "parameter"]
    assert frozen and frozen < set(params)
    graph = path
    if pipeline == "default":
        graph = tmp_path / "default.json"
        _run("opt", path, "-o", graph, "-p", DEFAULT_PIPELINE)
    params_file, batch_file = write_fixture_data(path, tmp_path / "data")
    _run("exec", graph, "--nproc", "2", "--steps", "3", "--optimizer", "adamw", "--lr", "0.01",
         "--params", params_file, "--batch", batch_file, "--save", tmp_path / "save")
    full = load_file(str(params_file))
    for rank in range(2):
        state = load_file(str(tmp_path / "save" / f"state.rank{rank}.safetensors"))
        for fqn in params:
            rows = state[fqn].shape[0]
            padded = torch.zeros((rows * 2, *full[fqn].shape[1:]), dtype=full[fqn].dtype)
            padded[:full[fqn].shape[0]] = full[fqn]
            initial = padded[rank * rows:(rank + 1) * rows]
            if fqn in frozen:
                assert torch.equal(state[fqn], initial), (rank, fqn)
                assert not any(k.startswith(f"optim.{fqn}.") for k in state), (rank, fqn)
            elif rank == 0:  # (a padded shard of the last rank may be all padding)
                assert not torch.equal(state[fqn], initial), (rank, fqn)
