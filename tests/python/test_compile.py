"""jointfx inside torch.compile: its tags steer aot_autograd's min-cut partitioner.

A SimpleFSDP-wrapped MLP (torchtitan's simple_fsdp, fake process group of 2 ranks: tracing and
partitioning only) is compiled with aot_autograd. With the plain min-cut partitioner the
gathered weight is saved for backward; with jointfx.compile.partition_fn (tag-fsdp
reshard=always, no remat) the backward graph re-gathers it and saves no gathered value. The
Inductor route (JointGraphPass as joint_custom_pre_pass) runs the same tagging with a uuid.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.fx as fx

if os.environ.get("CI") == "true":  # CI installs torchtitan (scripts/setup): absence is a failure
    import torchtitan.experiments.graph_trainer.simple_fsdp as torchtitan
else:
    torchtitan = pytest.importorskip("torchtitan.experiments.graph_trainer.simple_fsdp",
                                     reason="torchtitan is not installed: run scripts/setup")


def _in_child(check: str) -> None:
    """Runs `check` of this file in a fresh interpreter with the fake group of 2 ranks: the test
    process may already hold a real default group (conftest's gloo_world1), and there is one
    default group per process."""
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    repo = here.parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(here), str(repo / "python"), str(repo / "build" / "python"),
         os.environ.get("PYTHONPATH", "")])}
    code = ("import test_compile as t; from jointfx import titan; "
            f"titan.init_fake_world(2, 0); t.{check}()")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-6000:]


def _model() -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    return torchtitan.data_parallel(m, mesh, mode="fully_shard")


def _compile_graphs(partition) -> dict[str, fx.GraphModule]:
    from torch._dynamo.backends.common import aot_autograd

    torch._dynamo.reset()
    m = _model()
    graphs: dict[str, fx.GraphModule] = {}

    def keep(name):
        def compiler(gm, example_inputs):
            graphs[name] = gm
            return gm
        return compiler

    backend = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"),
                           partition_fn=partition)
    from jointfx.compile import JointGraphWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("always", JointGraphWarning)  # what the pipeline says gets through
        torch.compile(lambda x: m(x).sum(), backend=backend)(torch.randn(4, 16)).backward()
    return graphs


def _all_gathers(gm: fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if "all_gather_into_tensor" in str(n.target))


def _saved_gathered(fw: fx.GraphModule) -> list[str]:
    """Forward outputs (saved for backward) whose value is a gathered weight: derived only
    from all-gather results through waits, views and transposes."""
    gathered: set[fx.Node] = set()
    for n in fw.graph.nodes:
        if n.op != "call_function":
            continue
        ins = [i for i in n.all_input_nodes]
        if "all_gather_into_tensor" in str(n.target) or (ins and all(i in gathered for i in ins)):
            gathered.add(n)
    out = fw.graph.output_node().args[0]
    return [o.name for o in out if isinstance(o, fx.Node) and o in gathered]


def test_min_cut_partitioner_realizes_jointfx_tags() -> None:
    _in_child("check_min_cut_partitioner")


def test_inductor_joint_custom_pre_pass() -> None:
    _in_child("check_inductor_joint_custom_pre_pass")


def test_pipeline_warnings_reach_the_caller() -> None:
    _in_child("check_pipeline_warnings")


def check_min_cut_partitioner() -> None:
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from jointfx.compile import partition_fn

    plain = _compile_graphs(min_cut_rematerialization_partition)
    assert _all_gathers(plain["bw"]) == 0
    assert _saved_gathered(plain["fw"]), "baseline should save the gathered weight"

    tagged = _compile_graphs(partition_fn("tag-fsdp{reshard=always}"))
    assert _all_gathers(tagged["bw"]) >= 1, tagged["bw"].code  # re-gathered in backward
    assert _saved_gathered(tagged["fw"]) == [], tagged["fw"].code  # nothing gathered is saved
    assert _all_gathers(tagged["fw"]) == _all_gathers(plain["fw"])


def check_inductor_joint_custom_pre_pass() -> None:
    import torch._inductor.config as ic
    from torch._inductor.custom_graph_pass import CustomGraphPass

    from jointfx.compile import JointGraphPass

    p = JointGraphPass("tag-fsdp{reshard=always}")
    assert isinstance(p, CustomGraphPass)
    assert p.uuid() == JointGraphPass("tag-fsdp{reshard=always}").uuid()
    assert p.uuid() != JointGraphPass("tag-fsdp").uuid()
    torch._dynamo.reset()
    m = _model()
    with ic.patch(joint_custom_pre_pass=p, fx_graph_cache=False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(lambda x: m(x).sum(), backend="inductor")(torch.randn(4, 16)).backward()
    assert p.last_report is not None
    tag = p.last_report["passes"][0]
    assert tag["name"] == "tag-fsdp" and tag["stats"]["chains-resharded"] >= 2, tag


def check_pipeline_warnings() -> None:
    """reshard=default needs blocks; the joint graph of a compiled Sequential has none (its
    primals carry no FQNs), so tag-fsdp falls back to top-level modules and says so. Inside
    torch.compile that warning used to stay in a report nobody reads."""
    from jointfx.compile import JointGraphWarning, partition_fn

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _compile_graphs(partition_fn("tag-fsdp{reshard=default}"))
    ours = [str(w.message) for w in seen if issubclass(w.category, JointGraphWarning)]
    assert any("no repeated blocks" in m and "reshard=default" in m for m in ours), ours
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _compile_graphs(partition_fn("tag-fsdp{reshard=always}"))
    assert not [str(w.message) for w in seen if issubclass(w.category, JointGraphWarning)], [str(w.message) for w in seen]
