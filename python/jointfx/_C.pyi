"""Type stubs for jointfx._C, the in-process bridge to the C++ pass manager (module.cc)."""

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

class FxGraph:
    """A graph built by graph_from_fx; an EditScript takes it over."""
    direct: int  # nodes built from the FX objects
    via_json: int  # nodes read as JSON (the output node, extra meta, opaque values, ...)
    def json(self) -> bytes:
        """The canonical JSON document (writeJsonGraph), for tests."""
    def location(self, name: str) -> str | None:
        """Where the node named `name` was read from, as errors about it name it (None: no
        such node), for tests."""

def graph_from_fx(nodes: Sequence[Any], phases: Sequence[str | None], include_stack_trace: bool,
                  hooks: dict[str, Any], head: bytes) -> FxGraph:
    """The graph the C++ reader makes of export_text's document, built from the torch.fx
    `nodes` directly (`head`: the document without its nodes, JSON). Raises where the reader
    would reject the document."""

def run_pipeline_edits(doc: str | bytes, pipeline: str, verify: bool = True, timing: bool = False
                       ) -> tuple[list[Any], list[str], dict[str, Any], dict[str, Any]]:
    """Runs `pipeline` on `doc`; returns the JSON edit script (the reference form: entries
    "name", ("keep", name, node JSON, args changed, meta changed), ("new", name, node JSON,
    derived-from name or None)), the erased input nodes' names, the new header and the report
    (docs/pytorch-bridge.md "In place")."""

class EditScript:
    """Runs `pipeline` on `doc` and holds the result as an edit script of Python objects, by
    slot (an input node's index in `doc`, n_input + k for the k-th new node); see
    docs/pytorch-bridge.md "In place"."""

    def __init__(self, doc: str | bytes | FxGraph, pipeline: str, verify: bool = True,
                 timing: bool = False, expensive_checks: bool = True) -> None: ...
    @property
    def ops(self) -> list[tuple[Any, ...]]:
        """(0, slot) | (1, slot) | (2, slot, moved, args, meta_set, meta_drop, node_json) |
        (3, name, op, target, origin, moved, args, meta, node_json) | (4, slot, moved, recompute),
        in the new program order."""
    @property
    def erased(self) -> list[int]:
        """The erased input nodes' slots, in input order."""
    @property
    def header(self) -> dict[str, Any]: ...
    @property
    def report(self) -> dict[str, Any]: ...
    @property
    def counts(self) -> dict[str, int]:
        """kept, changed, new, erased and moved nodes."""
    @property
    def n_input(self) -> int: ...
    def bind(self, slots: list[Any], decode: Any, opaque: Any) -> None:
        """The fx.Nodes by slot (extended by the caller as it makes new nodes), decode(kind, text)
        for dtype / device / layout / memory_format arguments, opaque(type, repr)."""
    def args(self, k: int) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
        """(args, kwargs, has an opaque argument) of args entry k, holding the bound fx.Nodes."""

def verify_json(doc: str, one_gather_per_param: bool = False) -> list[str]:
    """The verifier's findings on the JSON v1 graph `doc`, one string each."""

def pass_names() -> list[str]:
    """The registered passes."""
