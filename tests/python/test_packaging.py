"""`pip install .` gives the package, the extension and the `jointfx` command.

Marked slow: it builds the C++ core from scratch through scikit-build-core (minutes on a small
machine; ccache helps when present). The fresh virtual environment sees this environment's
packages (torch) through a .pth file, and pip builds without isolation from the pinned
scikit-build-core and pybind11 of python/requirements.txt, so nothing is downloaded.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_pip_install_gives_command_version_and_stubs(tmp_path: Path) -> None:
    pytest.importorskip("scikit_build_core", reason="scikit-build-core: run scripts/setup")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], check=True, capture_output=True,
                               text=True).stdout.strip())
    (site / "_jfx_parent_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    cmd = [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
           "--disable-pip-version-check", f"--config-settings=build-dir={tmp_path / 'build'}"]
    if shutil.which("ccache"):
        cmd.append("--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([*cmd, str(REPO)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]

    # Outside the repository, so python/ and build/python cannot stand in for the install.
    run = dict(env=env, cwd=tmp_path, capture_output=True, text=True)
    passes = subprocess.run([str(venv / "bin" / "jointfx"), "passes"], **run)
    assert passes.returncode == 0, passes.stderr
    assert "tag-fsdp" in passes.stdout and "split-comm-groups" in passes.stdout
    version = subprocess.run([str(py), "-c", "import jointfx, _jointfx_C; "
                              "print(jointfx.__version__, jointfx.__file__, "
                              "'tag-fsdp' in _jointfx_C.pass_names())"], **run)
    assert version.returncode == 0, version.stderr
    want = re.search(r'__version__ = "([^"]+)"',
                     (REPO / "python" / "jointfx" / "_version.py").read_text()).group(1)
    ver, path, ok = version.stdout.split()
    assert ver == want and ok == "True"
    assert Path(path).is_relative_to(venv), path
    pkg = Path(path).parent
    assert (pkg / "py.typed").is_file()
    assert (pkg.parent / "_jointfx_C.pyi").is_file()
