"""The traced fixtures tests/data/traced/*.json: round trips, shapes, FSDP structure, regeneration.

Each fixture is a real make_fx trace (scripts/gen_fixtures.py). These tests pin down what such a
graph contains, so that a torch upgrade that changes it shows up here first.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    LLAMA_VARIANTS,
    REPO,
    TRACED_DIR,
    all_traced_fixture_paths,
    fixture_variant,
    propagate_fake,
    traced_fixture_paths,
)
from jointfx.export import dumps_graph, export_graph, import_graph, resolve_target

AG = "_c10d_functional.all_gather_into_tensor.default"
RS = "_c10d_functional.reduce_scatter_tensor.default"
AR = "_c10d_functional.all_reduce.default"
WAIT = "_c10d_functional.wait_tensor.default"
TO_COPY = "aten._to_copy.default"

PATHS = traced_fixture_paths()
IDS = [p.stem for p in PATHS]


def _load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_fixtures", REPO / "scripts" / "gen_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Graph:
    """A fixture document with name lookup and use lists."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.nodes = doc["nodes"]
        self.by_name = {n["name"]: n for n in self.nodes}
        self.users: dict[str, list[dict[str, Any]]] = {n["name"]: [] for n in self.nodes}
        for n in self.nodes:
            for ref in self.refs(n):
                self.users[ref].append(n)
        self.world = doc["meta"]["world_size"]

    @staticmethod
    def refs(node: dict[str, Any]) -> list[str]:
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

    def of(self, target: str) -> list[dict[str, Any]]:
        return [n for n in self.nodes if n["target"] == target]

    def arg_node(self, node: dict[str, Any], i: int = 0) -> dict[str, Any]:
        return self.by_name[node["args"][i]["node"]]

    def source_placeholder(self, node: dict[str, Any]) -> dict[str, Any] | None:
        """Walks single-input ops back from a collective's input to a placeholder."""
        cur = self.arg_node(node)
        while cur["op"] != "placeholder":
            refs = self.refs(cur)
            if len(set(refs)) != 1:
                return None
            cur = self.by_name[refs[0]]
        return cur

    def outputs(self) -> list[dict[str, Any]]:
        out = self.nodes[-1]
        assert out["op"] == "output"
        return [self.by_name[v["node"]] for v in out["args"][0]]


@pytest.fixture(scope="module", params=PATHS, ids=IDS)
def fixture(request: pytest.FixtureRequest) -> tuple[Path, str, Graph]:
    path: Path = request.param
    text = path.read_text(encoding="utf-8")
    return path, text, Graph(json.loads(text))


def test_fixture_set_matches_generator() -> None:
    gen = _load_generator()
    expected = sorted(f"{name}.json" for name in gen.all_fixture_names())
    assert [p.name for p in all_traced_fixture_paths()] == expected
    assert [p.name for p in PATHS] == sorted(f"{gen.fixture_name(v, w)}.json"
                                             for v, w in gen.FIXTURES)
    from jointfx.trace import VARIANTS

    assert LLAMA_VARIANTS == VARIANTS


def test_canonical_roundtrip_is_byte_identical(fixture: tuple[Path, str, Graph]) -> None:
    _, text, g = fixture
    gm = import_graph(g.doc)
    doc = export_graph(gm)
    assert doc == g.doc
    assert dumps_graph(doc) == text
    # The GraphModule itself has the same nodes, names, targets and meta.
    for node, nd in zip(gm.graph.nodes, g.nodes):
        assert node.name == nd["name"] and node.op == nd["op"]
        if node.op == "call_function":
            assert node.target is resolve_target(nd["target"])
        assert node.meta.get("seq_nr") == nd["meta"].get("seq_nr")
        assert node.meta.get("custom") == nd["meta"].get("custom")


def test_fake_propagation_reproduces_every_shape(fixture: tuple[Path, str, Graph]) -> None:
    """The imported graph runs under FakeTensorMode at the fixture's world size (collectives'
    fake kernels need no process group) and recomputes each node's recorded val."""
    _, _, g = fixture
    gm = import_graph(g.doc)
    pairs = propagate_fake(gm)
    for name, w, v in pairs:
        assert (tuple(v.shape), v.stride(), v.dtype) == (tuple(w.shape), w.stride(), w.dtype), name
    assert len(pairs) > len(g.nodes) // 2


def test_header(fixture: tuple[Path, str, Graph]) -> None:
    path, _, g = fixture
    kinds = [i["kind"] for i in g.doc["inputs"]]
    n_params = 20 if fixture_variant(path) == "tied" else 21  # tied: output.weight is the embedding
    assert kinds == ["parameter"] * n_params + ["buffer"] * 2 + ["user_input"] * 2
    placeholders = [n["name"] for n in g.nodes if n["op"] == "placeholder"]
    assert [i["name"] for i in g.doc["inputs"]] == placeholders
    outs = g.doc["outputs"]
    assert outs[0] == {"kind": "loss"}
    assert [o["fqn"] for o in outs[1:]] == [i["fqn"] for i in g.doc["inputs"][:n_params]]
    assert g.world == int(path.stem.rsplit("_w", 1)[1])
    for pg in g.doc["process_groups"]:
        assert pg["size"] == len(pg["ranks"]) and 0 in pg["ranks"]


def test_phases_are_complete_and_monotone(fixture: tuple[Path, str, Graph]) -> None:
    _, _, g = fixture
    order = ["forward", "loss", "backward"]
    phases = [n["meta"]["phase"] for n in g.nodes if n["op"] == "call_function"]
    assert phases == sorted(phases, key=order.index)
    assert set(phases) == set(order)
    loss = g.outputs()[0]
    assert loss["meta"]["phase"] == "loss" and loss["meta"]["custom"]["module_fqn"] == "loss"
    # Backward nodes inherit module_fqn from their forward op (via seq_nr).
    backward_mm = [n for n in g.of("aten.mm.default") if n["meta"]["phase"] == "backward"]
    assert all(n["meta"]["custom"]["module_fqn"] for n in backward_mm)


def _fsdp_group(g: Graph) -> dict[str, Any]:
    return g.doc["process_groups"][0]


def test_one_all_gather_per_parameter_in_forward(fixture: tuple[Path, str, Graph]) -> None:
    path, _, g = fixture
    tied = fixture_variant(path) == "tied"
    params = {i["name"]: i["fqn"] for i in g.doc["inputs"] if i["kind"] == "parameter"}
    group = _fsdp_group(g)
    gathered: dict[str, int] = {}
    for ag in g.of(AG):
        assert ag["meta"]["phase"] == "forward"
        assert ag["args"][1:] == [group["size"], group["name"]]
        src = g.source_placeholder(ag)
        assert src is not None and src["name"] in params, ag["name"]
        gathered[src["name"]] = gathered.get(src["name"], 0) + 1
        users = g.users[ag["name"]]
        assert [u["target"] for u in users if u["target"] == WAIT] == [WAIT]
        # SAC caches the un-waited all-gather output too: a dead aten.alias (DCE removes it).
        for other in (u for u in users if u["target"] != WAIT):
            assert other["target"] == "aten.alias.default" and not g.users[other["name"]]
        # The all-gather belongs to the module that owns the parameter (tied: or the output
        # projection, whose pre-hook gathers the embedding weight a second time).
        owner = params[src["name"]].rsplit(".", 1)[0]
        assert ag["meta"]["custom"]["module_fqn"] in ((owner, "output") if tied else (owner,))
    expected = {name: 1 for name in params}
    if tied:
        expected["tok_embeddings_weight"] = 2
    assert gathered == expected


def test_one_reduce_scatter_per_gradient_in_backward(fixture: tuple[Path, str, Graph]) -> None:
    path, _, g = fixture
    group = _fsdp_group(g)
    rs_nodes = g.of(RS)
    tied = fixture_variant(path) == "tied"
    # Tied: each of the two gathers of the embedding weight gets its own reduce-scatter, and
    # the gradient output adds the two waits.
    assert len(rs_nodes) == len(g.outputs()) - 1 + (1 if tied else 0)
    for grad in g.outputs()[1:]:
        # Gradient output = wait(reduce_scatter(...)), possibly through a cast back.
        node = grad
        while node["target"] == TO_COPY:
            node = g.arg_node(node)
        waits = [node]
        if tied and node["target"] == "aten.add.Tensor":
            waits = [g.arg_node(node, 0), g.arg_node(node, 1)]
        for wait in waits:
            assert wait["target"] == WAIT
            rs = g.arg_node(wait)
            assert rs["target"] == RS and rs["meta"]["phase"] == "backward"
            assert rs["args"][1:] == ["sum", group["size"], group["name"]]


def test_variant_specifics(fixture: tuple[Path, str, Graph]) -> None:
    path, _, g = fixture
    variant = fixture_variant(path)
    check = {"fsdp": _check_fsdp, "fsdp_tp": _check_fsdp_tp, "sac": _check_sac,
             "bf16": _check_bf16, "padding": _check_padding, "tied": _check_tied}[variant]
    check(g)


def _check_fsdp(g: Graph) -> None:
    assert g.doc["process_groups"] == [{"name": "0", "ranks": list(range(g.world)),
                                        "size": g.world}]
    assert not g.of(AR) and not g.of(TO_COPY)
    assert not any("recompute" in n["meta"] for n in g.nodes)
    assert len(g.of("aten._scaled_dot_product_flash_attention_for_cpu.default")) == 2


def _check_fsdp_tp(g: Graph) -> None:
    reduces = g.of(AR)
    # Per layer: attention and FFN outputs in forward, their inputs' gradients in backward.
    assert len(reduces) == 8
    assert all(r["args"][1:] == ["sum", "tp"] for r in reduces)
    assert sorted(r["meta"]["phase"] for r in reduces) == ["backward"] * 4 + ["forward"] * 4
    wq = g.by_name["layers_0_attention_wq_weight"]["meta"]["val"]
    wo = g.by_name["layers_0_attention_wo_weight"]["meta"]["val"]
    if g.world == 2:  # a 2 x 1 mesh: TP groups of one rank, weights only FSDP-sharded
        assert g.doc["process_groups"] == [{"name": "fsdp", "ranks": [0, 1], "size": 2},
                                           {"name": "tp", "ranks": [0], "size": 1}]
        assert g.doc["meta"]["mesh"] == {"dim_names": ["fsdp", "tp"], "shape": [2, 1]}
        assert wq["shape"] == [8, 16] and wo["shape"] == [8, 16]
        return
    assert g.world == 4
    assert g.doc["process_groups"] == [{"name": "fsdp", "ranks": [0, 2], "size": 2},
                                       {"name": "tp", "ranks": [0, 1], "size": 2}]
    assert g.doc["meta"]["mesh"] == {"dim_names": ["fsdp", "tp"], "shape": [2, 2]}
    # Column-parallel wq: TP-local [8, 16], FSDP shard [4, 16].
    assert wq["shape"] == [4, 16]
    assert wo["shape"] == [8, 8]  # row-parallel: [16, 8] TP-local, dim 0 halved by FSDP


def _check_sac(g: Graph) -> None:
    for n in g.nodes:
        meta = n["meta"]
        fqn = meta.get("custom", {}).get("module_fqn", "")
        if meta.get("phase") == "forward" and fqn.startswith("layers."):
            layer = int(fqn.split(".")[1])
            # The block's own hooks run outside its checkpoint; everything inside is tagged.
            if fqn != f"layers.{layer}":
                assert meta.get("ac_graph_id") == layer + 1, n["name"]
                assert meta.get("recompute") in (0, 3), n["name"]
        else:
            assert "recompute" not in meta and "ac_graph_id" not in meta, n["name"]
    for n in g.of("aten.mm.default"):
        if n["meta"]["phase"] == "forward" and "ac_graph_id" in n["meta"]:
            assert n["meta"]["recompute"] == 0  # MUST_SAVE
    tagged_ag = [n for n in g.of(AG) if "recompute" in n["meta"]]
    assert len(tagged_ag) == 18 and all(n["meta"]["recompute"] == 3 for n in tagged_ag)


def _check_bf16(g: Graph) -> None:
    for ag in g.of(AG):
        cast = g.arg_node(ag)
        assert cast["target"] == TO_COPY and cast["kwargs"] == {"dtype": {"dtype": "bfloat16"}}
        assert g.arg_node(cast)["op"] == "placeholder"
        assert ag["meta"]["val"]["dtype"] == "bfloat16"
    for rs in g.of(RS):
        cast = g.arg_node(rs)
        assert cast["target"] == TO_COPY and cast["kwargs"] == {"dtype": {"dtype": "float32"}}
        assert g.arg_node(cast)["meta"]["val"]["dtype"] == "bfloat16"
    for grad in g.outputs()[1:]:
        assert grad["target"] == WAIT and grad["meta"]["val"]["dtype"] == "float32"


def _check_padding(g: Graph) -> None:
    padded = {"tok_embeddings_weight", "output_weight"}
    rows = -(-33 // g.world)
    for name in padded:
        assert g.by_name[name]["meta"]["val"]["shape"] == [rows, 16]
    slices = []
    for ag in g.of(AG):
        src = g.source_placeholder(ag)
        assert src is not None
        (wait,) = [u for u in g.users[ag["name"]] if u["target"] == WAIT]
        after = [u["target"] for u in g.users[wait["name"]]]
        if src["name"] in padded:
            assert wait["meta"]["val"]["shape"] == [rows * g.world, 16]
            assert after == ["aten.slice.Tensor"]
            (sl,) = g.users[wait["name"]]
            assert sl["args"][1:] == [0, 0, 33]
            slices.append(sl)
        else:
            assert "aten.slice.Tensor" not in after
    assert len(slices) == 2
    pads = g.of("aten.constant_pad_nd.default")
    assert len(pads) == 2
    for pad in pads:
        assert pad["args"][1] == [0, 0, 0, rows * g.world - 33]
        assert [u["target"] for u in g.users[pad["name"]]] == [RS]


def _check_tied(g: Graph) -> None:
    assert "output_weight" not in g.by_name
    gathers = [ag for ag in g.of(AG)
               if g.source_placeholder(ag)["name"] == "tok_embeddings_weight"]
    # Two forward gathers of the one weight: the embedding's and the output projection's
    # (dedup-fsdp-unshard merges them); autograd sums both uses into one gradient.
    assert sorted(ag["meta"]["custom"]["module_fqn"] for ag in gathers) == ["output",
                                                                             "tok_embeddings"]
    assert len(g.of(RS)) == 21


def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    """scripts/gen_fixtures.py into a temp dir reproduces every committed fixture exactly."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_fixtures.py"),
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    fresh = sorted(p.name for p in tmp_path.glob("*.json"))
    assert fresh == [p.name for p in all_traced_fixture_paths()]
    for name in fresh:
        assert (tmp_path / name).read_bytes() == (TRACED_DIR / name).read_bytes(), name
