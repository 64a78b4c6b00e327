"""The GraphTrainer recipe of docs/python-api.md runs as written (extracted from the page)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEADING = "## Recipe: a pass in torchtitan's GraphTrainer"

# Appended to the recipe: what it must have produced.
CHECKS = """
report = gm.meta["jointfx_report"]
assert report["findings"] == [], report["findings"]
assert {p["name"] for p in report["passes"] if p["changed"]} >= {"tag-fsdp", "remat", "bucket"}
from jointfx.torchtitan import collective_summary
s = collective_summary(gm)
assert s["gathers_per_parameter"] == {"forward": {}, "backward": {}}, s
assert s["backward"]["all_gather"]["count"] > 0
print("RECIPE OK")
"""


def recipe(heading: str = HEADING) -> str:
    text = (REPO / "docs" / "python-api.md").read_text()
    section = text[text.index(heading):]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, f"no python block under {heading!r}"
    return m.group(1)


def test_graph_trainer_recipe_runs_as_written() -> None:
    try:
        import torchtitan.experiments.graph_trainer.trainer  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("torchtitan is not installed: run scripts/setup")
        pytest.skip("torchtitan is not installed: run scripts/setup")
    code = recipe()
    for name in ("model", "loss_fn", "step_inputs"):
        assert re.search(rf"^{name} = ", code, re.M), f"the recipe does not define {name}"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "python"), str(REPO / "build" / "python"),
                                          os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code + CHECKS], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-6000:]
    assert "RECIPE OK" in r.stdout
