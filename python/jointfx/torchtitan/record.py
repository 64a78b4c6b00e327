"""Per-rank records of a torchtitan training run, for comparing pass pipelines
(`--jointfx.record_dir DIR`): after every step DIR/rank<R>.json holds

    {"rank", "pipeline", "losses": [float.hex of this rank's step loss, ...],
     "step_seconds": [...], "peak_rss_bytes", "collectives": collective_summary of the final
     graph (None until the first step has traced and compiled it)}

The loss is the value `forward_backward_step` returns on this rank (summed over gradient
accumulation steps), before torchtitan reduces it for logging: exact, so two runs compare
bitwise. The file is replaced atomically each step.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any


class Recorder:
    def __init__(self, trainer: Any, folder: Path) -> None:
        import torch.distributed as dist

        self.trainer = trainer
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.path = folder / f"rank{self.rank}.json"
        self.losses: list[str] = []
        self.step_seconds: list[float] = []
        self._step_loss: Any = None

    def install(self) -> None:
        """Wraps the trainer's forward_backward_step and train_step (instance attributes)."""
        trainer = self.trainer
        fwd_bwd = trainer.forward_backward_step
        train_step = trainer.train_step

        def forward_backward_step(**kwargs: Any) -> Any:
            loss = fwd_bwd(**kwargs)
            d = loss.detach().float().sum()
            self._step_loss = d if self._step_loss is None else self._step_loss + d
            return loss

        def recorded_train_step(*args: Any, **kwargs: Any) -> Any:
            self._step_loss = None
            start = time.perf_counter()
            out = train_step(*args, **kwargs)
            self.step_seconds.append(time.perf_counter() - start)
            if self._step_loss is not None:
                self.losses.append(float(self._step_loss.item()).hex())
            self.write()
            return out

        trainer.forward_backward_step = forward_backward_step
        trainer.train_step = recorded_train_step

    def write(self) -> None:
        from jointfx.torchtitan import _State

        doc = {"rank": self.rank,
               "pipeline": getattr(self.trainer.config.compile, "pass_pipeline", None),
               "losses": self.losses, "step_seconds": self.step_seconds,
               "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
               "collectives": getattr(_State, "final_collectives", None)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise
