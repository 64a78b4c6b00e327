# lit configuration for the golden tests: text IR in, text IR out, checked by FileCheck.
import os

import lit.formats

config.name = "jointfx-golden"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".jfx", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.jfx_binary_dir, "tests", "golden")

config.environment["PATH"] = os.pathsep.join(
    [os.path.join(config.jfx_binary_dir, "tools"), config.llvm_bin, config.environment.get("PATH", os.environ["PATH"])]
)
# The checks on the passes and the IR (the unchanged-graph hash, the whole-graph name-index and
# use-list check) are off by default in `jointfx opt`; every test runs with them.
config.environment["JOINTFX_EXPENSIVE_CHECKS"] = "1"
config.substitutions.append(("%data", os.path.join(config.jfx_source_dir, "tests", "data")))
# `REQUIRES: jfx-runtime` / `UNSUPPORTED: jfx-runtime`: built with the LibTorch runtime (exec,
# parity, calibrate) or without it (the sanitizer build, a wheel built without torch).
if getattr(config, "jfx_with_torch", "OFF").upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("jfx-runtime")
