"""The generated op table (ir/ops_generated.def) against the installed torch, and what the CLI
knows about the ops real models trace to.

The staleness test regenerates the table in memory (scripts/gen_op_table.py --check, in a fresh
interpreter) and compares it row by row with the checked-in file: when torch is upgraded, it fails naming the rows that differ
and the command that regenerates the file.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import REPO, TRACED_DIR, model_fixture_paths

SCRIPT = REPO / "scripts" / "gen_op_table.py"
TABLE = REPO / "ir" / "ops_generated.def"


@lru_cache(maxsize=1)
def generator():
    spec = importlib.util.spec_from_file_location("gen_op_table", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@lru_cache(maxsize=1)
def generated() -> tuple[str, tuple[str, ...]]:
    header, rows = generator().generate()
    return header, tuple(rows)


def test_generated_table_is_current() -> None:
    # A fresh interpreter: modules other tests import may register ops of their own.
    r = subprocess.run([sys.executable, str(SCRIPT), "--check", str(TABLE)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.fail(r.stderr or r.stdout, pytrace=False)


def test_stale_table_is_reported_with_rows_and_command(tmp_path: Path) -> None:
    """A table one row off fails --check, naming that row and how to regenerate."""
    text = TABLE.read_text()
    row = 'S("aten.topk.default", Compute, None, 0, 2, 5, 0x0)'
    assert row in text
    stale = tmp_path / "ops_generated.def"
    stale.write_text(text.replace(row, 'S("aten.topk.default", Compute, None, 1, 2, 5, 0x0)'))
    r = subprocess.run([sys.executable, str(SCRIPT), "--check", str(stale)],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert '-S("aten.topk.default", Compute, None, 1, 2, 5, 0x0)' in r.stderr
    assert "+" + row in r.stderr
    assert "gen_op_table.py -o ir/ops_generated.def" in r.stderr


def test_rows_come_from_schemas_and_tags() -> None:
    """Spot checks against torch itself: the rows say what the schemas say."""
    import torch

    header, rows = generated()
    by_target = {r.split('"')[1]: r for r in rows if not r.startswith("V(")}
    assert f"torch {torch.__version__}" in header
    # Every overload of the namespaces, each once.
    names = torch._C._dispatch_get_all_op_names()
    aten = {n for n in names if n.startswith("aten::")}
    assert sum(1 for t in by_target if t.startswith("aten.")) == len(aten)
    assert len(by_target) == len(rows) - 1
    # In-place random: flags 1 (random) | 2 (writes).
    assert torch.Tag.nondeterministic_seeded in torch.ops.aten.bernoulli_.float.tags
    assert by_target["aten.bernoulli_.float"].startswith('S("aten.bernoulli_.float", Compute, '
                                                         'InPlace, 3, 1, 2, 0x1)')
    assert ", InPlace, 2," in by_target["aten.div_.Scalar"]
    assert ", Out, 2," in by_target["aten.add.out"]
    assert by_target["aten.split.Tensor"].startswith('S("aten.split.Tensor", View, View, 0,')
    assert by_target["_c10d_functional.wait_tensor.default"].startswith("W(")
    assert by_target["_c10d_functional.all_to_all_single.default"].startswith(
        'C("_c10d_functional.all_to_all_single.default", AllToAll, false,')


# ---- the CLI on traced graphs of other model families

# The targets the op table missed before it came from torch's registry (jointfx stats listed
# them under unknown_targets), and the category each now has.
ONCE_UNKNOWN = {
    "aten.bernoulli_.float": "elementwise",
    "aten.div_.Scalar": "elementwise",
    "aten.add_.Tensor": "elementwise",
    "aten.topk.default": "reduction",
    "aten.convolution.default": "conv",
    "aten.convolution_backward.default": "conv",
    "aten.max_pool2d_with_indices.default": "pool",
    "aten.max_pool2d_with_indices_backward.default": "pool",
    "aten.native_batch_norm.default": "norm",
}


def run_cli(jfx_bin: Path, *args: object) -> subprocess.CompletedProcess:
    return subprocess.run([str(jfx_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


MODEL_PATHS = model_fixture_paths()


@pytest.mark.skipif(not MODEL_PATHS, reason="no model-family fixtures")
@pytest.mark.parametrize("path", MODEL_PATHS, ids=[p.stem for p in MODEL_PATHS])
def test_stats_knows_every_model_family_op(jfx_bin: Path, path: Path) -> None:
    r = run_cli(jfx_bin, "stats", "--json", path)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout)
    assert stats["unknown_targets"] == {}, "a target torch's registry does not have"


def test_once_unknown_ops_are_known(jfx_bin: Path) -> None:
    """Each op of ONCE_UNKNOWN occurs in a traced fixture, and stats on that fixture neither
    lists it as unknown nor misses its category."""
    seen: dict[str, Path] = {}
    for path in sorted(TRACED_DIR.glob("*.json")):
        doc = json.loads(path.read_text())
        for n in doc["nodes"]:
            if n["op"] == "call_function" and n.get("target") in ONCE_UNKNOWN:
                seen.setdefault(n["target"], path)
    assert seen.keys() == ONCE_UNKNOWN.keys(), "fixtures no longer trace to these ops"
    for path in sorted(set(seen.values())):
        r = run_cli(jfx_bin, "stats", "--json", path)
        assert r.returncode == 0, r.stderr
        stats = json.loads(r.stdout)
        assert stats["unknown_targets"] == {}, path.name
        for target, where in seen.items():
            if where == path:
                assert ONCE_UNKNOWN[target] in stats["categories"], (target, path.name)


def test_remat_refuses_tagged_dropout_from_the_cli(jfx_bin: Path, tmp_path: Path) -> None:
    """The traced GPT-2 with its block-0 MLP tagged MUST_RECOMPUTE (dropout included): `jointfx
    opt -p remat` exits non-zero naming the in-place random op, and writes no output."""
    doc = json.loads((TRACED_DIR / "gpt2_w2.json").read_text())
    tagged = 0
    for n in doc["nodes"]:
        meta = n.get("meta", {})
        fqn = meta.get("custom", {}).get("module_fqn", "")
        if (n["op"] == "call_function" and meta.get("phase") == "forward"
                and fqn.startswith("transformer.h.0.mlp")
                and not n["target"].startswith("_c10d_functional.")):
            meta["recompute"] = 2  # MUST_RECOMPUTE
            tagged += 1
    assert tagged > 3
    src = tmp_path / "gpt2_mlp_recompute.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "out.json"
    r = run_cli(jfx_bin, "opt", src, "--pipeline", "remat", "-o", out)
    assert r.returncode != 0
    assert "bernoulli_" in r.stderr and "aten.bernoulli_.float" in r.stderr, r.stderr
    assert "draws random numbers" in r.stderr
    assert not out.exists()
