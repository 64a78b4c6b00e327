"""The C++ `jointfx` CLI on real traced graphs: verify, convert, opt --pipeline=dce, stats --json.

The binary comes from JFX_BIN (default build/tools/jointfx); every test here skips with that
reason when it is not built.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import fixture_variant, propagate_fake, traced_fixture_paths
from jointfx.export import import_graph

PATHS = traced_fixture_paths()
IDS = [p.stem for p in PATHS]
COLLECTIVE_KIND = {
    "_c10d_functional.all_gather_into_tensor.default": "all_gather",
    "_c10d_functional.reduce_scatter_tensor.default": "reduce_scatter",
    "_c10d_functional.all_reduce.default": "all_reduce",
}


def run_cli(binary: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def check_ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout[-3000:]}\n" \
                                 f"stderr: {proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_verify_accepts_traced_fixture(jfx_bin: Path, path: Path) -> None:
    # Raw SAC traces carry dead aliases of un-waited all-gathers; the verifier accepts them
    # (a view nobody reads cannot observe the buffer).
    proc = run_cli(jfx_bin, "verify", path)
    assert "ok" in check_ok(proc)


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_convert_roundtrips_bytes(jfx_bin: Path, path: Path, tmp_path: Path) -> None:
    """Our canonical JSON is the C++ writer's: JSON -> JSON and JSON -> text -> JSON are exact."""
    same = tmp_path / "same.json"
    text = tmp_path / "graph.jfx"
    back = tmp_path / "back.json"
    check_ok(run_cli(jfx_bin, "convert", path, "-o", same))
    assert same.read_bytes() == path.read_bytes()
    check_ok(run_cli(jfx_bin, "convert", path, "-o", text))
    check_ok(run_cli(jfx_bin, "convert", text, "-o", back))
    assert back.read_bytes() == path.read_bytes()


def _counts(doc: dict[str, Any]) -> Counter[str]:
    return Counter(n["target"] for n in doc["nodes"])


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_dce_then_convert_roundtrips(jfx_bin: Path, path: Path, tmp_path: Path) -> None:
    out = tmp_path / "dce.json"
    check_ok(run_cli(jfx_bin, "opt", path, "--pipeline=dce", "-o", out))
    before, after = json.loads(path.read_text()), json.loads(out.read_text())
    # DCE keeps every collective, every wait and every graph output.
    for target in (*COLLECTIVE_KIND, "_c10d_functional.wait_tensor.default"):
        assert _counts(after)[target] == _counts(before)[target], target
    assert after["nodes"][-1] == before["nodes"][-1]
    assert after["inputs"] == before["inputs"] and after["outputs"] == before["outputs"]
    # Whatever DCE removed was dead: every remaining call has a user.
    used = {ref for n in after["nodes"] for ref in _refs(n)}
    assert all(n["name"] in used for n in after["nodes"] if n["op"] == "call_function")
    # The result round-trips through text and still imports and shape-checks in PyTorch.
    text, back = tmp_path / "dce.jfx", tmp_path / "back.json"
    check_ok(run_cli(jfx_bin, "convert", out, "-o", text))
    check_ok(run_cli(jfx_bin, "convert", text, "-o", back))
    assert back.read_bytes() == out.read_bytes()
    check_ok(run_cli(jfx_bin, "verify", out))
    propagate_fake(import_graph(after))


def _refs(node: dict[str, Any]) -> list[str]:
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            if set(v) == {"node"}:
                found.append(v["node"])
            else:
                for x in v.values():
                    walk(x)

    walk(node["args"])
    walk(node["kwargs"])
    return found


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_stats_counts_fsdp_collectives(jfx_bin: Path, path: Path) -> None:
    stats = json.loads(check_ok(run_cli(jfx_bin, "stats", "--json", path)))
    doc = json.loads(path.read_text())
    n_params = sum(1 for i in doc["inputs"] if i["kind"] == "parameter")
    n_grads = sum(1 for o in doc["outputs"] if o["kind"] == "gradient")
    assert stats["nodes"] == len(doc["nodes"])
    tied = fixture_variant(path) == "tied"  # output.weight is the embedding, gathered twice
    assert stats["parameters"] == n_params == (20 if tied else 21)
    assert stats["inputs"] == {"buffer": 2, "parameter": n_params, "user_input": 2}
    assert stats["phases"] == dict(Counter(n["meta"].get("phase", "unknown") for n in doc["nodes"]))
    coll = stats["collectives"]
    n_ar = 8 if fixture_variant(path) == "fsdp_tp" else 0
    # Tied: the embedding weight has two gathers and two reduce-scatters (one per use).
    n_ag = n_params + (1 if tied else 0)
    n_rs = n_grads + (1 if tied else 0)
    expected_kinds = {"all_gather": n_ag, "reduce_scatter": n_rs}
    if n_ar:
        expected_kinds["all_reduce"] = n_ar
    # One all-gather per parameter (all in forward) and one reduce-scatter per gradient (all
    # in backward); TP adds all-reduces, half in each phase.
    assert coll["by_kind"] == expected_kinds
    assert coll["by_phase"] == {"forward": n_ag + n_ar // 2, "backward": n_rs + n_ar // 2}
    assert coll["by_kind_phase"]["all_gather"] == {"forward": n_ag}
    assert coll["by_kind_phase"]["reduce_scatter"] == {"backward": n_rs}
    fsdp_group = doc["process_groups"][0]["name"]
    expected_groups = {fsdp_group: n_ag + n_rs}
    if n_ar:
        expected_groups["tp"] = n_ar
    assert coll["by_group"] == expected_groups


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_stats_knows_every_traced_op(jfx_bin: Path, path: Path) -> None:
    """Every target a real trace contains is known to the op table (docs/op-table.md)."""
    stats = json.loads(check_ok(run_cli(jfx_bin, "stats", "--json", path)))
    assert stats["unknown_targets"] == {}, "not in torch's registry nor ir/ops.def"


def test_every_torch_float8_float4_and_complex32_dtype_loads(jfx_bin: Path, tmp_path: Path) -> None:
    """Scaled-precision training graphs (float8 on AMD, MX scales, packed fp4) and complex half:
    PyTorch's dtypes, exported, read by the C++ formats and written back byte for byte through
    the text format; a dtype the table lacked was 'unknown dtype' and the graph did not load."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from jointfx.export import dumps_graph, export_graph, import_graph

    dtypes = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
              torch.float8_e5m2fnuz, torch.float8_e8m0fnu, torch.complex32]

    def f(x: torch.Tensor) -> list[torch.Tensor]:
        return [x.to(d) for d in dtypes] + [x.to(torch.uint8).view(torch.float4_e2m1fn_x2)]

    doc = export_graph(make_fx(f, tracing_mode="fake")(torch.randn(4, 4)))
    path = tmp_path / "g.json"
    path.write_text(dumps_graph(doc))
    assert run_cli(jfx_bin, "verify", path).returncode == 0
    assert run_cli(jfx_bin, "convert", path, "-o", tmp_path / "g.jfx").returncode == 0
    assert run_cli(jfx_bin, "convert", tmp_path / "g.jfx", "-o", tmp_path / "back.json").returncode == 0
    assert (tmp_path / "back.json").read_text() == path.read_text()
    back = import_graph(json.loads((tmp_path / "back.json").read_text()))
    got = {n.meta["val"].dtype for n in back.graph.nodes if n.op == "call_function"}
    assert got == {*dtypes, torch.float4_e2m1fn_x2, torch.uint8}
