"""torchtitan's shipped GraphTrainer configs at full width (tests/data/scale, jointfx.titan_scale).

Each fixture is the first 2 blocks of a shipped config (Llama-3 8B at world 8, 70B at world 64,
70B TP 8 x FSDP 8, DeepSeek-V3 16B with EP 1 and 8, Qwen3 14B) traced by GraphTrainer's own
tracer on the meta device and the fake process group, with GraphTrainer's memory policy: the
graph jointfx receives. Beside it, GraphTrainer's own plan of it (its pass list up to Inductor).
These tests hold jointfx's plans against that anchor and against FSDP2's reference plan on the
H100 profile, and auto against its memory limit (scripts/gen_scale_fixtures.py makes them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO

SCALE_DIR = REPO / "tests" / "data" / "scale"
PRESETS = sorted(p.name[: -len("_l2.json")] for p in SCALE_DIR.glob("*_l2.json"))
HARDWARE = "h100"

# Presets where the default plan still loses to GraphTrainer's own plan: (why, the measured
# ceilings of its step and peak over GraphTrainer's). A strict xfail below, so a fix shows up.
# DeepSeek (2 layers): the default pipeline is bounded by FSDP2's reference plan's peak, and the
# reference buckets the chunked loss's 8 reductions of the output projection's gradient into one
# bucket (8 gradients live: 18.26 GiB against GraphTrainer's 7.43). bucket{param-once=true}
# (FSDP2's buffers hold each gradient once) brings the reference and the default to 7.34 GiB,
# but as the reference's rule it made the real Trainer's HSDP run launch 16 all-reduces against
# GraphTrainer's 8 and reshard=always 9 forward all-gathers against 8, so it is an option only.
# The step: the gloo ring-chunk rule (exact-rs-order) keeps expert reduce-scatters unbucketed
# although the target is NCCL. TP: TP's all-reduces are left where they are (+0.85% at 2
# layers; at full size the default plan wins, bench/README.md "titan_scale.py").
DEFAULT_LOSES_TO_GRAPH_TRAINER = {
    "deepseek_v3_16b_w8": ("the reference bound holds 8 chunk gradients; exact-rs-order", 1.08, 2.5),
    "deepseek_v3_16b_ep8_w8": ("the reference bound holds 8 chunk gradients", 1.07, 2.8),
    "llama3_70b_tp8_w64": ("TP collectives are not overlapped", 1.01, 1.0),
}


def test_every_preset_has_its_fixtures() -> None:
    from jointfx.titan_scale import PRESETS as TRACED

    assert PRESETS == sorted(TRACED)
    for preset in PRESETS:
        assert (SCALE_DIR / f"{preset}_l2.graph_trainer.json").is_file()


def _run(jfx: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(jfx), *args], capture_output=True, text=True, timeout=600)


def _simulated(jfx: Path, graph: Path) -> dict[str, Any]:
    r = _run(jfx, "analyze", str(graph), "--hardware", HARDWARE, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _fixture(preset: str, plan: str = "") -> Path:
    return SCALE_DIR / f"{preset}_l2{'.' + plan if plan else ''}.json"


@pytest.mark.parametrize("path", sorted(SCALE_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_scale_fixture_verifies(jfx_bin: Path, path: Path) -> None:
    r = _run(jfx_bin, "verify", str(path))
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_70b_fixture_has_the_shipped_configs_dimensions() -> None:
    """Full width, 2 layers: Llama-3 70B's FFN (28672 x 8192) sharded over 64 ranks, its
    sequence (8192), and the 8B and 70B graphs differing only in shapes."""
    doc = json.loads(_fixture("llama3_70b_w64").read_text())
    model = doc["meta"]["model"]
    assert (doc["meta"]["world_size"], model["layers"], model["seq_len"]) == (64, 2, 8192)
    assert model["config"] == "graph_trainer_llama3_70b"
    shape = {n["name"]: n["meta"]["val"]["shape"] for n in doc["nodes"]
             if n["op"] == "placeholder" and "val" in n["meta"]}
    shards = {i["fqn"]: shape[i["name"]] for i in doc["inputs"] if i.get("kind") == "parameter"}
    assert shards["layers.0.feed_forward.w1.weight"] == [28672 // 64, 8192]
    assert shards["tok_embeddings.weight"] == [128256 // 64, 8192]
    small = json.loads(_fixture("llama3_8b_w8").read_text())
    assert [n["target"] for n in small["nodes"]] == [n["target"] for n in doc["nodes"]]


@pytest.mark.parametrize("preset", PRESETS)
def test_default_plan_against_graph_trainer_and_fsdp2(jfx_bin: Path, preset: str,
                                                      tmp_path: Path) -> None:
    """The default plan's estimated peak and simulated step (H100 profile) are no higher than
    FSDP2's reference plan's, and no higher than GraphTrainer's own plan's."""
    out = tmp_path / "default.json"
    r = _run(jfx_bin, "opt", str(_fixture(preset)), "-o", str(out), "-p", "default")
    assert r.returncode == 0, r.stderr
    mine = _simulated(jfx_bin, out)["simulation"]
    anchor = _simulated(jfx_bin, _fixture(preset, "graph_trainer"))["simulation"]
    reference = _simulated(jfx_bin, _fixture(preset))["reference_plan"]
    assert mine["peak_memory_bytes"] <= reference["peak_memory_bytes"]
    assert mine["step_s"] <= reference["step_s"]
    wins = (mine["peak_memory_bytes"] <= anchor["peak_memory_bytes"]
            and mine["step_s"] <= anchor["step_s"])
    if preset in DEFAULT_LOSES_TO_GRAPH_TRAINER:
        why, step_ceiling, peak_ceiling = DEFAULT_LOSES_TO_GRAPH_TRAINER[preset]
        assert not wins, "the default plan now wins: drop the entry"
        assert mine["step_s"] <= step_ceiling * anchor["step_s"]  # no worse than measured
        assert mine["peak_memory_bytes"] <= peak_ceiling * anchor["peak_memory_bytes"]
        pytest.xfail(why)
    assert wins


@pytest.mark.parametrize("preset", PRESETS)
def test_auto_at_graph_trainers_peak_is_faster(jfx_bin: Path, preset: str,
                                               tmp_path: Path) -> None:
    """Given GraphTrainer's own plan's estimated peak as its limit, auto's plan stays within
    it and simulates faster than GraphTrainer's plan."""
    anchor = _simulated(jfx_bin, _fixture(preset, "graph_trainer"))["simulation"]
    limit = anchor["peak_memory_bytes"]
    out = tmp_path / "auto.json"
    r = _run(jfx_bin, "opt", str(_fixture(preset)), "-o", str(out), "-p", "auto",
             "--set", f"memory-limit={limit}")
    assert r.returncode == 0, r.stderr
    mine = _simulated(jfx_bin, out)["simulation"]
    assert mine["peak_memory_bytes"] <= limit
    assert mine["step_s"] < anchor["step_s"]


@pytest.mark.parametrize("preset", PRESETS)
def test_auto_never_exceeds_its_limit(jfx_bin: Path, preset: str, tmp_path: Path) -> None:
    """At five limits from under the smallest feasible one to above the unplanned peak: a plan
    whose estimated peak is within the limit, or exit 2 naming the smallest feasible limit (above
    the limit asked for), and no output."""
    src = _fixture(preset)
    unplanned = _simulated(jfx_bin, src)["simulation"]["peak_memory_bytes"]
    floor = None
    for frac in (0.5, 0.8, 0.9, 1.0, 1.2):
        limit = int(unplanned * frac)
        out = tmp_path / f"auto_{frac}.json"
        r = _run(jfx_bin, "opt", str(src), "-o", str(out), "-p", "auto",
                 "--set", f"memory-limit={limit}")
        if r.returncode:
            assert r.returncode == 2, r.stderr
            m = re.search(r"the smallest feasible limit is (\d+) bytes", r.stderr)
            assert m, r.stderr
            assert int(m.group(1)) > limit
            assert floor in (None, int(m.group(1)))
            floor = int(m.group(1))
            assert not out.exists()
            continue
        peak = _simulated(jfx_bin, out)["simulation"]["peak_memory_bytes"]
        assert peak <= limit, f"limit {limit}: planned peak {peak}"
        if floor is not None:
            assert limit >= floor
    # The named floor is a limit auto plans under.
    if floor is not None:
        out = tmp_path / "auto_floor.json"
        r = _run(jfx_bin, "opt", str(src), "-o", str(out), "-p", "auto",
                 "--set", f"memory-limit={floor}")
        assert r.returncode == 0, r.stderr
        assert _simulated(jfx_bin, out)["simulation"]["peak_memory_bytes"] <= floor


def test_regenerating_a_scale_fixture_is_byte_identical(tmp_path: Path) -> None:
    """scripts/gen_scale_fixtures.py reproduces the committed files (one preset)."""
    pytest.importorskip("torchtitan.experiments.graph_trainer.trainer")
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'python'}:{REPO / 'build' / 'python'}",
               OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_scale_fixtures.py"),
                        "--out", str(tmp_path), "--only", "llama3_8b_w8"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("llama3_8b_w8_l2.json", "llama3_8b_w8_l2.graph_trainer.json"):
        assert (tmp_path / name).read_bytes() == (SCALE_DIR / name).read_bytes(), name
