"""`pip install .` gives the whole tool: the package with its extension jointfx._C, the `jointfx`
command with every subcommand (exec, parity and calibrate through the LibTorch runtime module,
linked against the installed torch), and the shipped pipelines and hardware profiles, found by
name from any folder.

Marked slow: it builds the C++ core and the runtime from scratch through scikit-build-core
(minutes on a small machine; ccache helps when present). The fresh virtual environment sees this
environment's packages through a .pth file, and torch through a link in its own site-packages, as
pip would install it there (the runtime module finds LibTorch beside it, in
site-packages/torch/lib). pip builds without isolation from the pinned scikit-build-core and
pybind11 of python/requirements.txt, so nothing is downloaded. Every command runs in a temporary
folder with no PYTHONPATH, so neither python/ nor build/ nor configs/ of the checkout can stand in
for the install.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "data" / "traced" / "fsdp_w2.json"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("scikit_build_core", reason="scikit-build-core: run scripts/setup")
    import torch

    tmp = tmp_path_factory.mktemp("pip")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], check=True, capture_output=True,
                               text=True).stdout.strip())
    (site / "_jfx_parent_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "torch").symlink_to(Path(torch.__file__).parent, target_is_directory=True)
    cmd = [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
           "--disable-pip-version-check", f"--config-settings=build-dir={tmp / 'build'}"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if shutil.which("ccache"):
        cmd.append("--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache")
        env.setdefault("CCACHE_BASEDIR", str(REPO))
        env.setdefault("CCACHE_NOHASHDIR", "1")
    start = time.monotonic()
    r = subprocess.run([*cmd, str(REPO)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    print(f"pip install: {time.monotonic() - start:.0f} s")
    work = tmp / "work"
    work.mkdir()
    shutil.copy(FIXTURE, work / "in.json")
    return {"venv": venv, "py": py, "site": site, "work": work, "bin": venv / "bin" / "jointfx"}


def _run(inst: dict[str, Path], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(a) for a in args], env=env, cwd=inst["work"], capture_output=True,
                          text=True)


@pytest.mark.slow
def test_pip_install_gives_command_version_and_stubs(installed: dict[str, Path]) -> None:
    passes = _run(installed, installed["bin"], "passes")
    assert passes.returncode == 0, passes.stderr
    assert "tag-fsdp" in passes.stdout and "split-comm-groups" in passes.stdout
    version = _run(installed, installed["py"], "-c",
                   "import jointfx, jointfx._C as C; print(jointfx.__version__, jointfx.__file__, "
                   "C.__file__, 'tag-fsdp' in C.pass_names())")
    assert version.returncode == 0, version.stderr
    want = re.search(r'__version__ = "([^"]+)"',
                     (REPO / "python" / "jointfx" / "_version.py").read_text()).group(1)
    ver, path, ext, ok = version.stdout.split()
    assert ver == want and ok == "True"
    pkg = Path(path).parent
    assert pkg == installed["site"] / "jointfx"
    assert Path(ext).parent == pkg  # the extension is jointfx._C, inside the package
    assert (pkg / "py.typed").is_file() and (pkg / "_C.pyi").is_file()
    for name in ("default", "auto", "cleanup"):
        assert (pkg / "configs" / "pipelines" / f"{name}.json").is_file()
    for name in ("a100", "h100", "h200", "cpu"):
        assert (pkg / "configs" / "hardware" / f"{name}.json").is_file()
    # One copy in the checkout, copied in by the build: the same bytes.
    assert ((pkg / "configs" / "pipelines" / "default.json").read_bytes() ==
            (REPO / "configs" / "pipelines" / "default.json").read_bytes())


@pytest.mark.slow
def test_installed_command_finds_pipelines_and_profiles_by_name(
        installed: dict[str, Path]) -> None:
    jfx = installed["bin"]
    configs = installed["site"] / "jointfx" / "configs"
    r = _run(installed, jfx, "opt", "in.json", "-o", "default.json", "-p", "default", "--stats")
    assert r.returncode == 0, r.stderr
    assert "bucket.buckets.all_gather" in r.stderr and "split-comm-groups" in r.stderr
    r = _run(installed, jfx, "opt", "in.json", "-o", "path.json", "-p",
             configs / "pipelines" / "default.json")
    assert r.returncode == 0, r.stderr
    assert (installed["work"] / "default.json").read_bytes() == \
        (installed["work"] / "path.json").read_bytes()

    r = _run(installed, jfx, "opt", "in.json", "-o", "auto.json", "-p", "auto",
             "--set", "memory-limit=40GiB", "--set", "hardware=a100", "--remarks")
    assert r.returncode == 0, r.stderr
    assert "plan=auto chose" in r.stderr and "a100" in r.stderr

    r = _run(installed, jfx, "analyze", "default.json", "--hardware", "h100", "--json")
    assert r.returncode == 0, r.stderr
    sim = json.loads(r.stdout)["simulation"]
    assert sim["step_s"] > 0 and sim["hardware"] == "h100", sim

    # Unknown names list what the installed package has, and only that: the wheel never reads
    # the checkout it was built from.
    r = _run(installed, jfx, "analyze", "in.json", "--hardware", "h900")
    assert r.returncode == 2
    assert "hardware profiles: a100, cpu, h100, h200 (in " + str(configs / "hardware") + ")" \
        in r.stderr, r.stderr
    r = _run(installed, jfx, "opt", "in.json", "-o", "x.json", "-p", "defualt")
    assert r.returncode == 2
    assert "pipelines: auto, cleanup, default (in " + str(configs / "pipelines") + ")" \
        in r.stderr, r.stderr
    assert str(REPO) not in r.stderr


@pytest.mark.slow
def test_installed_command_runs_graphs(installed: dict[str, Path]) -> None:
    jfx = installed["bin"]
    help_ = _run(installed, jfx, "--help")
    assert re.search(r"^ +exec +Run a graph", help_.stdout, re.M), help_.stdout
    assert re.search(r"^ +parity ", help_.stdout, re.M) and \
        re.search(r"^ +calibrate ", help_.stdout, re.M)
    # The runtime module is in the package, and takes LibTorch from the torch beside it.
    module = installed["site"] / "jointfx" / "libjointfx_runtime.so"
    assert module.is_file()
    rpath = subprocess.run(["readelf", "-d", str(module)], capture_output=True, text=True).stdout
    assert "[$ORIGIN/../torch/lib]" in rpath, rpath

    data = REPO / "tests" / "runtime" / "data"
    r = _run(installed, jfx, "exec", data / "linear_w2.jfx", "--nproc", "2", "--steps", "3",
             "--timeout-s", "120", "--progress", "never")
    assert r.returncode == 0, r.stdout + r.stderr
    losses = re.findall(r"^step (\d+) loss ([0-9.e+-]+)", r.stdout, re.M)
    assert [s for s, _ in losses] == ["1", "2", "3"], r.stdout
    r = _run(installed, jfx, "parity", data / "linear_w2.jfx", "-p", "default", "--nproc", "2",
             "--steps", "2", "--timeout-s", "120")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_installed_package_runs_pipelines_by_name(installed: dict[str, Path]) -> None:
    code = (
        "import json, sys, jointfx, jointfx._C\n"
        "gm = jointfx.import_graph(jointfx.load_graph(sys.argv[1]))\n"
        "before = sum(n.op == 'call_function' for n in gm.graph.nodes)\n"
        "gm = jointfx.run_pipeline(gm, 'default')\n"
        "rep = gm.meta['jointfx_report']\n"
        "print(json.dumps({'passes': [[p['name'], p['changed'], p['stats']] for p in "
        "rep['passes']], 'before': before}))\n"
    )
    r = _run(installed, installed["py"], "-c", code, "in.json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    names = [p[0] for p in out["passes"]]
    assert names == ["dce", "tag-fsdp", "remat", "dedup-fsdp-unshard", "bucket",
                     "split-comm-groups", "schedule"], names
    stats = {p[0]: p[2] for p in out["passes"]}
    assert stats["bucket"]["buckets.all_gather"] > 0, stats["bucket"]
    assert stats["tag-fsdp"]["chains-resharded"] > 0, stats["tag-fsdp"]
