"""A stop from the driver (a timeout, Ctrl-C) gives the rank that saves its `stop_grace_s` on both launchers,
though its peer never asked for a grace period: under mpirun the peer's exit would otherwise make Open MPI kill
the saver mid-save. Ranks on the driver (np < 0); the Spark barrier stage's case is in test_resume_spark.py.
The oracle is the checkpoint file itself (read with pickle), and a next run that loads it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import sparkrunner
from sparkrunner import Runner
from sparkrunner.errors import RunTimeoutError
from tests.helpers import leftover_rank_processes, start_driver, wait_for_line
from tests.recovery.stop_saves import rank0_saves_on_stop, saved_state

pytestmark = pytest.mark.timeout(300)


def next_run_loads(folder: Path) -> object:
    return Runner(np=-1, launcher="direct", checkpoint_dir=str(folder), tracking=False, progress=False).run(
        sparkrunner.load_checkpoint
    )


@pytest.mark.slow
def test_a_timeout_gives_the_saving_rank_its_grace(launcher: str, tmp_path: Path) -> None:
    """np<0, each launcher: stopped by `timeout`, rank 0's save (1.5 s) is complete and a next run loads it."""
    folder = tmp_path / "checkpoints"
    runner = Runner(
        np=-2,
        launcher=launcher,
        timeout=5,
        stop_grace_s=20,
        checkpoint_dir=str(folder),
        tracking=False,
        progress=False,
    )
    with pytest.raises(RunTimeoutError):
        runner.run(rank0_saves_on_stop, str(tmp_path / "started"))
    assert (tmp_path / "started.0").exists() and (tmp_path / "started.1").exists(), "the ranks never started"
    state = saved_state(folder)
    assert state["attempt"] == 0 and state["step"] > 0
    assert next_run_loads(folder) == state
    assert leftover_rank_processes(grace_s=5.0) == {}


@pytest.mark.slow
def test_ctrl_c_gives_the_saving_rank_its_grace(launcher: str, tmp_path: Path) -> None:
    """np<0, each launcher: Ctrl-C on a driver process; the caller gets KeyboardInterrupt and rank 0's save is
    complete."""
    folder = tmp_path / "checkpoints"
    proc = start_driver("saves_on_stop", "-2", launcher, str(folder), str(tmp_path / "started"))
    wait_for_line(proc, "rank started")
    wait_for_line(proc, "rank started")
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert "RAISED KeyboardInterrupt" in out, out
    assert saved_state(folder)["step"] > 0
    assert leftover_rank_processes(grace_s=10) == {}
