"""jointfx.reference, PyTorch's side of the executor comparisons: its failure handling. (Its
numerics are checked against the executor by ctest's runtime.graphmodule.* tests.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from jointfx import reference

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "traced" / "fsdp_w2.json"


def test_a_failing_rank_is_named_and_its_waiting_peer_killed(tmp_path: Path) -> None:
    params, batch = reference.write_fixture_data(FIXTURE, tmp_path)
    # Rank 1 leaves after joining; rank 0 then waits in its first all-gather, whose timeout is
    # 300 s. Waiting on the ranks in order would report rank 0 after those 300 s; watching every
    # exit reports rank 1 and kills rank 0.
    with pytest.raises(RuntimeError) as error:
        reference.run(FIXTURE, nproc=2, params=params, batch=batch, steps=1, timeout_s=300,
                      debug_exit_rank=1)
    message = str(error.value)
    assert message.startswith("reference rank 1 exited with 3:\nrank 1: --debug-exit-rank")
    assert "--- rank 0:" in message


def test_two_ranks_that_finish_write_their_logs(tmp_path: Path) -> None:
    params, batch = reference.write_fixture_data(FIXTURE, tmp_path)
    log = tmp_path / "log.rank{rank}.jsonl"
    reference.run(FIXTURE, nproc=2, params=params, batch=batch, steps=2, log=str(log))
    for rank in (0, 1):
        lines = Path(str(log).replace("{rank}", str(rank))).read_text().splitlines()
        assert len(lines) == 2
