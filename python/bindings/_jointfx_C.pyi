"""Type stubs for _jointfx_C, the in-process bridge to the C++ pass manager (module.cc)."""

from collections.abc import Sequence
from typing import Any

class JointfxError(ValueError):
    """A bad graph or pipeline; the message names the place (node, pass, option)."""

def run_pipeline_json(doc: str, pipeline: str, verify: bool = True,
                      timing: bool = False) -> tuple[str, dict[str, Any]]:
    """Runs `pipeline` on the JSON v1 graph `doc`; returns (graph JSON, report). The report has
    "passes" (per pass: name, options, changed, seconds, stats), "total_seconds" and "log"."""

def export_nodes(nodes: Sequence[Any], phases: Sequence[str | None], include_stack_trace: bool,
                 hooks: dict[str, Any]) -> bytes:
    """The JSON array of the torch.fx `nodes` as jointfx.export._node_to_json writes them
    (UTF-8); `hooks` (jointfx.export._native_hooks) holds the Python definitions it calls back
    into for values it does not write itself."""

def verify_json(doc: str, one_gather_per_param: bool = False) -> list[str]:
    """The verifier's findings on the JSON v1 graph `doc`, one string each."""

def pass_names() -> list[str]:
    """The registered passes."""
