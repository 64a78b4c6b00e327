"""Shared pytest fixtures: paths, the traced fixture files, a gloo world of one, the CLI binary."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TRACED_DIR = REPO / "tests" / "data" / "traced"

# pyproject.toml sets pythonpath too; this keeps `pytest tests/python/x.py` from elsewhere working.
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

# Tracing and the tiny graphs gain nothing from intra-op threads on a small shared machine.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The pass manager's unchanged-graph hash check in every in-process run (off by default there),
# so a pass that reports "unchanged" but changed the graph fails the tests.
os.environ.setdefault("JOINTFX_EXPENSIVE_CHECKS", "1")


# Model code of the real model libraries (jointfx.models.real) must never download: every model is
# built from a config with random weights, and this makes an attempt fail instead.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# The tiny-Llama variants (jointfx.trace.VARIANTS); the other fixtures are model families
# (jointfx.models.MODEL_FIXTURES) with tests of their own (test_models.py), models of real model
# libraries (jointfx.models.real.REAL_FIXTURES: hf_*, timm_*, test_real_models.py), and
# graph_trainer model families traced by torchtitan's tracer (titan_*, test_graph_trainer.py).
LLAMA_VARIANTS = ("fsdp", "fsdp_tp", "sac", "bf16", "padding", "tied")
# Fixture name prefixes of the real model libraries' models (jointfx.models.real).
REAL_PREFIXES = ("hf_", "timm_")


def all_traced_fixture_paths() -> list[Path]:
    return sorted(TRACED_DIR.glob("*.json"))


def traced_fixture_paths() -> list[Path]:
    """The tiny-Llama fixtures, which the tests written for that model check."""
    return [p for p in all_traced_fixture_paths() if fixture_variant(p) in LLAMA_VARIANTS]


def model_fixture_paths() -> list[Path]:
    """The fixtures of the other model families jointfx.models builds."""
    return [p for p in all_traced_fixture_paths()
            if fixture_variant(p) not in LLAMA_VARIANTS and not is_titan_fixture(p)
            and not is_real_fixture(p)]


def real_fixture_paths() -> list[Path]:
    """The fixtures of models from real model libraries (jointfx.models.real): hf_*, timm_*."""
    return [p for p in all_traced_fixture_paths() if is_real_fixture(p)]


def is_real_fixture(path: Path) -> bool:
    return path.name.startswith(REAL_PREFIXES)


def titan_fixture_paths() -> list[Path]:
    """The fixtures traced by torchtitan's GraphTrainer tracer (jointfx.titan):
    titan_<family>_w<N>.json."""
    return [p for p in all_traced_fixture_paths() if is_titan_fixture(p)]


def is_titan_fixture(path: Path) -> bool:
    return path.name.startswith("titan_")


def fixture_variant(path: Path) -> str:
    """'padding_w4.json' -> 'padding'."""
    return path.stem.rsplit("_w", 1)[0]


def ensure_gloo_world1() -> None:
    """Makes the default process group a real gloo group of one rank over 127.0.0.1, for running
    graphs on real tensors.

    torch.distributed has one default group per process, and tests that trace in process replace
    it with the fake group (jointfx.titan.init_fake_world, any world size): so a gloo world of one
    is made again whenever the default group is anything else, and one already there is kept.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        if dist.get_backend() == "gloo" and dist.get_world_size() == 1:
            return
        dist.destroy_process_group()
    from jointfx.groups import use_one_gloo_worker_thread

    store = dist.TCPStore("127.0.0.1", 0, 1, True)  # port 0: any free port
    use_one_gloo_worker_thread()  # every gloo group of the test process, as exec runs gloo
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)


@pytest.fixture
def gloo_world1() -> None:
    """The default process group is a gloo world of one for this test (ensure_gloo_world1)."""
    ensure_gloo_world1()


def jfx_bin_path() -> Path:
    value = os.environ.get("JFX_BIN")
    path = Path(value) if value else REPO / "build" / "tools" / "jointfx"
    return path if path.is_absolute() else REPO / path


@pytest.fixture(scope="session")
def jfx_bin() -> Path:
    """The jointfx CLI (env JFX_BIN, default build/tools/jointfx); skips when it is not built."""
    path = jfx_bin_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        if os.environ.get("CI") == "true":  # CI builds the binary: its absence is a failure
            pytest.fail(f"jointfx CLI not found at {path}")
        pytest.skip(f"jointfx CLI not found at {path}: build it (cmake --build build) or set "
                    "JFX_BIN to the binary")
    return path


def propagate_fake(gm: Any) -> list[tuple[str, Any, Any]]:
    """Runs GraphModule `gm` under FakeTensorMode from its placeholders' recorded vals (the
    collectives' fake kernels need no process group) and pairs each tensor of every node's
    recorded val with the one propagation gives: (node name, recorded, propagated), tuples and
    lists flattened."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    recorded = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        inputs = [torch.empty_strided(n.meta["val"].shape, n.meta["val"].stride(),
                                      dtype=n.meta["val"].dtype)
                  for n in gm.graph.nodes if n.op == "placeholder"]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*inputs)

    def tensors(val: Any) -> list[Any]:
        if isinstance(val, torch.Tensor):
            return [val]
        if isinstance(val, (list, tuple)):
            return [t for v in val for t in tensors(v)]
        return []

    return [(n.name, want, got) for n in gm.graph.nodes
            for want, got in zip(tensors(recorded[n.name]), tensors(n.meta.get("val")))]
