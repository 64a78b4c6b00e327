"""The in-place bridge: run_pipeline edits the caller's fx.Graph from the C++ edit script.

On every traced fixture, the identity pipeline and the default pipeline applied in place give the
same document as the C++ pass manager's own output, leave every untouched node's meta dict the
same object with the same contents, and give new nodes the source meta of the node they derive
from. Tensor constants survive (bitwise), non-tensor placeholders and outputs get kinds of their
own, and a dce round trip still partitions with aot_autograd's min-cut partitioner.
"""

from __future__ import annotations

import copy
import json
import os
import warnings

import pytest
import torch
from torch import fx

from conftest import traced_fixture_paths
from jointfx.export import (
    InputSpec,
    OutputSpec,
    dumps_graph,
    export_graph,
    import_graph,
    load_graph,
)

if os.environ.get("CI") != "true":
    pytest.importorskip("jointfx._C", reason="jointfx._C not built (scripts/build builds it)")

from jointfx.passes import graph_pass, run_pipeline, run_pipeline_doc  # noqa: E402

FIXTURES = traced_fixture_paths()
DEFAULT = ("dce,tag-fsdp{reshard=default},remat,dedup-fsdp-unshard,"
           "bucket{plan=blocks, kinds=ag,rs,ar},split-comm-groups,schedule{prefetch=1}")


class _Probe:
    """A meta value the format cannot carry: it survives only if the meta dict is kept."""


def _probe(gm: fx.GraphModule) -> dict[fx.Node, tuple[dict, dict]]:
    before = {}
    for n in gm.graph.nodes:
        n.meta["probe"] = _Probe()
        n.meta["nn_module_stack"] = {"L__self__": ("model", torch.nn.Module)}
        n.meta["stack_trace"] = f"File 'model.py', line 1, in {n.name}"
        before[n] = (n.meta, dict(n.meta))
    return before


@pytest.mark.parametrize("pipeline", ["", DEFAULT], ids=["identity", "default"])
@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_in_place_matches_cpp_and_keeps_meta(path, pipeline) -> None:
    doc = load_graph(path)
    gm = import_graph(doc)
    mode = next(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder").fake_mode
    before = _probe(gm)
    want, _ = run_pipeline_doc(export_graph(gm), pipeline, verify=False)
    out = run_pipeline(gm, pipeline, verify=False)
    assert out is gm
    # The edited graph is exactly what the C++ pass manager produced, except for the source meta
    # new nodes inherit from the node they derive from (their C++ meta is a subset of it).
    got = export_graph(gm)
    old_names = {n.name for n in before}
    for d in (got, want):
        for nd in d["nodes"]:
            if nd["name"] not in old_names:
                for key in ("seq_nr", "custom"):
                    nd["meta"].pop(key, None)
    assert dumps_graph(got) == dumps_graph(want)
    edits = gm.meta["jointfx_report"]["edits"]
    if not pipeline:
        assert edits["new"] == edits["erased"] == edits["changed"] == edits["moved"] == 0
    nodes = list(gm.graph.nodes)
    changed = 0
    for n in nodes:
        if n in before:
            meta, snapshot = before[n]
            assert n.meta is meta, n.name
            assert isinstance(n.meta["probe"], _Probe)
            if n.meta != snapshot:
                changed += 1
                # Only keys the format carries may change.
                diff = {k for k in set(n.meta) | set(snapshot) if n.meta.get(k) is not snapshot.get(k)}
                assert diff <= {"recompute", "phase", "autograd_backward", "custom", "val",
                                "ac_graph_id", "seq_nr"} | {k for k in diff if k.startswith("fsdp")}, (n.name, diff)
        else:
            # New nodes: FakeTensors in the graph's own mode, source meta of their origin.
            vals = n.meta.get("val")
            for v in (vals if isinstance(vals, tuple) else (vals,)):
                if isinstance(v, torch.Tensor):
                    assert v.fake_mode is mode, n.name
            assert "stack_trace" in n.meta and "nn_module_stack" in n.meta, n.name
    assert changed <= edits["changed"]
    erased = set(before) - set(nodes)
    assert len(erased) == edits["erased"]
    if pipeline:
        assert edits["new"] > 0 and edits["erased"] > 0


def test_python_code_is_regenerated_on_demand() -> None:
    """The edited GraphModule regenerates its code lazily (torch.fx's _LazyGraphModule), in
    place: `.code`, a deepcopy and a pickle all see the edited graph."""
    import copy
    import pickle

    from torch.fx._lazy_graph_module import _LazyGraphModule

    gm = import_graph(load_graph(FIXTURES[0]))
    before = {n.name for n in gm.graph.nodes}
    out = run_pipeline(gm, DEFAULT, verify=False)
    assert out is gm and isinstance(gm, _LazyGraphModule)
    new = sorted(n.name for n in gm.graph.nodes if n.name not in before)
    assert new
    for g in (gm, copy.deepcopy(gm)):
        code = g.code
        assert all(name in code for name in new)
        assert [n.name for n in g.graph.nodes] == [n.name for n in gm.graph.nodes]
    # Unpickling retraces the code, so names may differ; the ops do not.
    unpickled = pickle.loads(pickle.dumps(gm))
    assert [n.target for n in unpickled.graph.nodes if n.op == "call_function"] == \
        [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_graph_pass_accepts_graph_trainer_kwargs() -> None:
    gm = import_graph(load_graph(FIXTURES[0]))
    p = graph_pass("dce")
    assert p(gm, None, config=object(), something_else=1) is gm


def _constant_model_graph() -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """A joint graph of a model with a tensor constant (a get_attr in make_fx's output)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(0)
    w = torch.randn(4, 4)
    x = torch.randn(3, 4)

    def step(w, x):
        w = w.detach().requires_grad_(True)
        scale = torch.tensor([0.5, 1.5, -2.0, 0.25])  # becomes _tensor_constant0
        loss = ((x @ w) * scale).tanh().sum()
        (g,) = torch.autograd.grad(loss, [w])
        return [loss, g]

    gm = make_fx(step)(w, x)
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    return gm, [w, x]


def test_tensor_constant_survives_in_place_and_rebuild() -> None:
    gm, inputs = _constant_model_graph()
    want = gm(*inputs)
    specs = dict(inputs=[InputSpec("parameter", "w"), InputSpec("user_input")],
                 outputs=[OutputSpec("loss"), OutputSpec("gradient", "w")])
    doc = export_graph(gm, **specs)
    (const,) = doc["constants"]
    assert const["dtype"] == "float32" and const["shape"] == [4]
    rebuilt = import_graph(doc)
    got = rebuilt(*inputs)
    for a, b in zip(want, got):
        assert torch.equal(a, b)
    for in_place in (True, False):
        g2 = copy.deepcopy(gm)
        out = run_pipeline(g2, "dce", in_place=in_place, **specs)
        got = out(*inputs)
        for a, b in zip(want, got):
            assert torch.equal(a, b), in_place


def test_constants_round_trip_through_cpp_text() -> None:
    import jointfx._C  # noqa: F401

    gm, _ = _constant_model_graph()
    doc = export_graph(gm)
    out, _ = run_pipeline_doc(doc, "dce")
    assert out["constants"] == doc["constants"]


def test_non_tensor_placeholders_and_outputs_get_their_own_kinds() -> None:
    gm, _ = _constant_model_graph()
    g = gm.graph
    first = next(iter(g.nodes))
    with g.inserting_before(first):
        n_int = g.placeholder("n_steps")
    n_int.meta["val"] = 3
    out = g.output_node()
    out.args = (list(out.args[0]) + [n_int, None],)
    gm.recompile()
    doc = export_graph(gm, inputs=[InputSpec("parameter", "w"), InputSpec("user_input")],
                       outputs=[OutputSpec("loss"), OutputSpec("gradient", "w")])
    kinds = {i["name"]: i["kind"] for i in doc["inputs"]}
    assert kinds["n_steps"] == "opaque"
    assert [o["kind"] for o in doc["outputs"]] == ["loss", "gradient", "opaque", "opaque"]
    new, _ = run_pipeline_doc(doc, "dce")
    assert new["inputs"] == doc["inputs"] and new["outputs"] == doc["outputs"]


def test_no_specs_on_a_graph_with_collectives_warns() -> None:
    gm = import_graph(load_graph(FIXTURES[0]))
    gm.meta.pop("jointfx")
    with pytest.warns(UserWarning, match="no input specs"):
        export_graph(gm)


def test_dce_round_trip_still_partitions_with_min_cut() -> None:
    """A dynamic-shape joint graph has SymInt placeholders: their val must survive the round
    trip, or the min-cut partitioner fails with `cannot save: non-tensor output`."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    captured = {}

    def compiler(gm, example_inputs):
        return make_boxed_func(gm)

    def partition(joint, joint_inputs, **kw):
        captured["non_tensor"] = [n.name for n in joint.graph.nodes if n.op == "placeholder"
                                  and not isinstance(n.meta.get("val"), torch.Tensor)]
        run_pipeline(joint, "dce", verify=False)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kw)

    def f(x, w):
        return ((x @ w).relu() * x.shape[0]).sum()

    torch._dynamo.reset()
    fn = torch.compile(f, backend=aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                                               partition_fn=partition), dynamic=True)
    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    fn(x, w).backward()
    assert captured["non_tensor"], "the joint graph has no SymInt placeholder"
    want = torch.autograd.grad(f(x, w), [w])[0]
    assert torch.allclose(w.grad, want)


# ----------------------------------------------------------------------------- the executor


def _cli(binary, *args):
    import subprocess

    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _constant_doc() -> dict:
    gm, _ = _constant_model_graph()
    return export_graph(gm, inputs=[InputSpec("parameter", "w"), InputSpec("user_input")],
                        outputs=[OutputSpec("loss"), OutputSpec("gradient", "w")])


def test_constant_graph_runs_bitwise_in_exec(jfx_bin, tmp_path) -> None:
    from jointfx.export import write_graph

    doc = _constant_doc()
    write_graph(doc, tmp_path / "g.json")
    # The default pipeline applied in Python, in place, then run by the executor.
    gm = import_graph(doc)
    run_pipeline(gm, DEFAULT)
    write_graph(export_graph(gm), tmp_path / "after.json")
    proc = _cli(jfx_bin, "parity", tmp_path / "g.json", tmp_path / "after.json", "--nproc", 1,
                "--steps", 2)
    assert proc.returncode == 0, proc.stderr
    assert "bitwise identical" in proc.stdout
    proc = _cli(jfx_bin, "parity", tmp_path / "g.json", "--pipeline", DEFAULT, "--nproc", 1,
                "--steps", 2)
    assert proc.returncode == 0, proc.stderr
    # The executor really reads the constant: zeroing it changes the loss.
    zero = dict(doc)
    zero["constants"] = [dict(c, data="0" * len(c["data"])) for c in doc["constants"]]
    write_graph(zero, tmp_path / "zero.json")
    # A difference keeps the run directories: --keep puts them under tmp_path, not in /tmp.
    proc = _cli(jfx_bin, "parity", tmp_path / "g.json", tmp_path / "zero.json", "--nproc", 1,
                "--steps", 1, "--keep", tmp_path / "runs")
    assert proc.returncode == 1 and "DIFFERENT" in proc.stdout, proc.stdout + proc.stderr
    assert f"run directories kept in {tmp_path / 'runs'}" in proc.stdout


def test_parity_refused_before_running_leaves_no_directory(jfx_bin, tmp_path) -> None:
    import os
    import subprocess
    from pathlib import Path

    # A world the graph was not traced for is refused before A runs: nothing to keep, so the
    # temporary run directory goes (TMPDIR points parity's at a directory of the test's own).
    graph = Path(__file__).resolve().parents[1] / "runtime" / "data" / "linear_w1.jfx"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.run([str(jfx_bin), "parity", str(graph), "--nproc", "2", "--steps", "1"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TMPDIR=str(tmp)))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "but the world has 2" in proc.stderr
    assert "kept" not in proc.stderr
    assert list(tmp.iterdir()) == []


def _with_placeholder(doc: dict, name: str, kind: str, val=None, output_kind=None) -> dict:
    doc = json.loads(dumps_graph(doc))
    node = {"args": [], "kwargs": {}, "meta": {} if val is None else {"val": val}, "name": name,
            "op": "placeholder", "target": name}
    doc["nodes"].insert(0, node)
    doc["inputs"].insert(0, {"kind": kind, "name": name})
    if output_kind is not None:
        doc["nodes"][-1]["args"][0].append({"node": name})
        doc["outputs"].append({"kind": output_kind})
    return doc


def test_exec_supplies_mesh_and_scalar_inputs(jfx_bin, tmp_path) -> None:
    from jointfx.export import write_graph

    doc = _with_placeholder(_constant_doc(), "mesh", "mesh", output_kind="mesh")
    doc = _with_placeholder(doc, "n", "opaque", val=3, output_kind="opaque")
    write_graph(doc, tmp_path / "g.json")
    proc = _cli(jfx_bin, "exec", tmp_path / "g.json", "--nproc", 1, "--steps", 1)
    assert proc.returncode == 0, proc.stderr


def test_exec_rejects_unsuppliable_input_before_launch(jfx_bin, tmp_path) -> None:
    from jointfx.export import write_graph

    doc = _with_placeholder(_constant_doc(), "arg1_1", "opaque")
    write_graph(doc, tmp_path / "g.json")
    proc = _cli(jfx_bin, "exec", tmp_path / "g.json", "--nproc", 2, "--steps", 1)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "input 'arg1_1'" in proc.stderr
    assert "rank" not in proc.stderr  # refused by the launcher, not from inside a rank


def test_constants_round_trip_through_text_format(jfx_bin, tmp_path) -> None:
    from jointfx.export import write_graph

    write_graph(_constant_doc(), tmp_path / "g.json")
    assert _cli(jfx_bin, "convert", tmp_path / "g.json", "-o", tmp_path / "g.jfx").returncode == 0
    text = (tmp_path / "g.jfx").read_text()
    assert 'constant "_tensor_constant0" dtype=float32 shape=[4]' in text
    assert _cli(jfx_bin, "convert", tmp_path / "g.jfx", "-o", tmp_path / "g2.json").returncode == 0
    assert (tmp_path / "g.json").read_bytes() == (tmp_path / "g2.json").read_bytes()
    (tmp_path / "bad.jfx").write_text(text.replace('data="00', 'data="zz'))
    proc = _cli(jfx_bin, "verify", tmp_path / "bad.jfx")
    assert proc.returncode == 2 and "bad.jfx:3:" in proc.stderr and "hex" in proc.stderr
