"""What a wheel build (`pip install .`, CMakeLists.txt with SKBUILD) needs from the Python
environment it installs into, as CMake `set()` lines on stdout:

- JFX_WHEEL_TORCH_DIR: the torch package whose LibTorch the runtime module links, "" when there is
  none. Under pip's build isolation the target environment's site-packages is not on sys.path,
  but sysconfig still names it, so a torch installed there before the build is found too.
- JFX_SCRIPTS_TO_SITE_PACKAGES: from the scripts folder (where pip puts the `jointfx` command) to
  site-packages, for each install scheme of this Python, ':'-separated: the command finds its
  package, and so its pipelines, profiles and runtime module, through them (passes/data_files.h).

Imports nothing heavy: torch is located, not imported.
"""

from __future__ import annotations

import importlib.util
import os
import sysconfig


def torch_dir() -> str:
    candidates: list[str] = []
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        candidates += list(spec.submodule_search_locations)
    paths = sysconfig.get_paths()
    candidates += [os.path.join(paths[k], "torch") for k in ("platlib", "purelib")]
    for c in candidates:
        if os.path.isfile(os.path.join(c, "share", "cmake", "Torch", "TorchConfig.cmake")):
            return os.path.realpath(c)
    return ""


def scripts_to_site_packages() -> list[str]:
    schemes = [sysconfig.get_default_scheme()]
    schemes += [s for s in sysconfig.get_scheme_names() if s not in schemes]
    out: list[str] = []
    for scheme in schemes:
        if os.name == "posix" and scheme.startswith("nt"):
            continue
        try:
            paths = sysconfig.get_paths(scheme)
        except KeyError:
            continue
        for key in ("platlib", "purelib"):
            rel = os.path.relpath(paths[key], paths["scripts"])
            if ":" not in rel and '"' not in rel and rel not in out:
                out.append(rel)
    return out


def cmake_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


if __name__ == "__main__":
    print(f"set(JFX_WHEEL_TORCH_DIR {cmake_quote(torch_dir())})")
    print(f"set(JFX_SCRIPTS_TO_SITE_PACKAGES {cmake_quote(':'.join(scripts_to_site_packages()))})")
