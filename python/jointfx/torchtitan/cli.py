"""`python -m jointfx.torchtitan`: torchtitan's `train.main` with jointfx's pipelines registered,
a `jointfx` config section, and on a machine without a GPU, CPU with gloo.

torchtitan's config is a dataclass tree that `ConfigManager` fills from `--module`/`--config`
(a config_registry function) and then from the command line through tyro, with the config's own
class as the schema. The `jointfx` section is a field of a subclass of that class
(jointfx.torchtitan._with_section): the loaded config is re-made as the subclass before tyro
parses, so `--jointfx.memory_limit 40GiB` parses, `--help` lists the section, and the Trainer
the config builds (its owner class is inherited) reads `config.jointfx`.

CPU: torchtitan picks its device type once, when torchtitan.tools.utils is imported
(`_get_available_device_type() or "cuda"`), and several modules copy it at their own import.
Without a GPU this module sets it to "cpu" right after that import, before anything copies it;
torch.distributed then picks gloo for "cpu". torch.cpu lacks the memory queries torchtitan's
DeviceMemoryMonitor makes (device name and properties, memory_stats, peak reset, empty_cache),
and its current_device() is a name where torchtitan's barrier wants an index:
`CpuDeviceModule` answers them from the process (peak RSS as the peak, physical memory as the
capacity). That is for trying and testing on a laptop or CI, not for measuring.

gloo: every gloo process group the run creates gets one worker thread
(jointfx.groups.use_one_gloo_worker_thread), as `jointfx exec` does by default.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import types
from typing import Any

import torch

from jointfx.groups import use_one_gloo_worker_thread

# torchtitan modules that copy tools.utils.device_type / device_module when imported.
_COPIES_DEVICE = ("torchtitan.components.metrics", "torchtitan.distributed.utils",
                  "torchtitan.distributed.parallel_dims", "torchtitan.models.common.token_dispatcher",
                  "torchtitan.tools.profiler", "torchtitan.trainer", "torchtitan.train")


class CpuDeviceModule(types.ModuleType):
    """torch.cpu plus the device-memory queries torchtitan makes of a device module, answered
    for this process: for trying and testing on CPU."""

    def __init__(self) -> None:
        super().__init__("jointfx_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def current_device() -> int:
        # torch.cpu answers "cpu"; torchtitan hands it to barrier(device_ids=[...]), which takes
        # indices.
        return 0

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return platform.processor() or platform.machine() or "cpu"

    @staticmethod
    def get_device_properties(device: Any = None) -> Any:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return types.SimpleNamespace(name=CpuDeviceModule.get_device_name(), total_memory=total)

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        return {"active_bytes.all.peak": peak, "reserved_bytes.all.peak": peak,
                "num_alloc_retries": 0, "num_ooms": 0}

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        pass  # the process's peak RSS cannot be reset

    @staticmethod
    def empty_cache() -> None:
        pass


def use_cpu() -> None:
    """Makes torchtitan run on CPU: device type "cpu" (so gloo), device module CpuDeviceModule.
    Must run before the torchtitan modules that copy the device type are imported."""
    early = [m for m in _COPIES_DEVICE if m in sys.modules]
    if early:
        raise RuntimeError("jointfx.torchtitan: cannot switch torchtitan to CPU, these modules "
                           f"already copied its device type: {', '.join(early)}")
    from torchtitan.tools import utils

    utils.device_type = "cpu"
    utils.device_module = CpuDeviceModule()


def main(argv: list[str] | None = None) -> None:
    if not torch.cuda.is_available():
        use_cpu()
    # torchtitan's gloo groups (all of them on CPU, the CPU side of "cuda:nccl,cpu:gloo" on a GPU)
    # and the ones jointfx registers: one worker thread each (jointfx.groups).
    # JOINTFX_GLOO_THREADS=2 keeps PyTorch's default (bench/stress_torchtitan.py's "before").
    if (os.environ.get("JOINTFX_GLOO_THREADS", "1") == "1" and use_one_gloo_worker_thread()
            and os.environ.get("RANK", "0") == "0"):
        print("jointfx.torchtitan: gloo process groups run on one worker thread each (two "
              "collectives of one group on PyTorch's two threads corrupt the heap now and then: "
              "docs/executor.md, Limits)", file=sys.stderr, flush=True)
    import torchtitan.train as train
    from torchtitan.config import ConfigManager

    import jointfx.torchtitan as jt

    jt.register()

    class JointfxConfigManager(ConfigManager):
        """torchtitan's ConfigManager, with the `jointfx` section added to the loaded config."""

        def _load_config(self, args: list[str]) -> tuple[object, list[str]]:
            config, rest = super()._load_config(args)
            return jt._with_section(config), rest

        def _validate_config(self) -> None:
            super()._validate_config()
            try:  # with every option parsed, before the model is built: not at the first step
                jt.check_options(self.config)
            except ValueError as e:
                raise SystemExit(f"jointfx.torchtitan: error: {e}") from None

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    # train.main makes its ConfigManager by this module-level name.
    train.ConfigManager = JointfxConfigManager
    train.main()
