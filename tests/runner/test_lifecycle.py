"""After every run — success, crash, timeout, Ctrl-C, killed driver — no process of the run is left."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankFailedError, RunTimeoutError
from sparkrunner.observe.observers import RunObserver, RunRecord
from tests.helpers import leftover_rank_processes, start_driver, wait_for_line
from tests.matrix import LAUNCHERS


def dies_hard() -> None:
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


def spawns_a_grandchild() -> None:
    subprocess.Popen(["sleep", "600"])  # must die with the run, too
    if os.environ["RANK"] == "0":
        raise RuntimeError("stop")
    time.sleep(600)


def test_a_killed_rank_fails_the_run_and_stops_the_others(launcher: str) -> None:
    with pytest.raises(RankFailedError) as info:
        Runner(np=-2, launcher=launcher).run(dies_hard)
    assert info.value.rank == 1
    assert info.value.exc_type == "RankProcessDied"
    assert "exit code -9 (killed by SIGKILL)" in str(info.value)  # the same words whatever the launcher


@pytest.mark.slow
def test_grandchildren_die_with_the_run(launcher: str) -> None:
    with pytest.raises(RankFailedError, match="stop"):
        Runner(np=-2, launcher=launcher).run(spawns_a_grandchild)
    assert leftover_rank_processes(grace_s=5) == {}


@pytest.mark.slow
def test_run_timeout_stops_everything(launcher: str) -> None:
    with pytest.raises(RunTimeoutError, match="timeout=2"):
        Runner(np=-2, launcher=launcher, timeout=2).run(time.sleep, 600)
    assert leftover_rank_processes(grace_s=5) == {}


class SlowToStart(RunObserver):
    """An observer whose `on_start` (before any rank starts) takes `seconds`, as a slow tracking server's would."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.done_at: float | None = None

    def on_start(self, record: RunRecord) -> None:
        time.sleep(self.seconds)
        self.done_at = time.monotonic()


def touch_then_sleep(path: str) -> None:
    Path(path).touch()
    time.sleep(600)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("launcher", "slow_s", "says"),
    [
        pytest.param("direct", 3, "every rank was stopped", id="direct-3"),
        pytest.param("mpirun", 3, "every rank was stopped", id="mpirun-3", marks=LAUNCHERS[1].marks),
        pytest.param("direct", 5, "it ran out before its ranks", id="direct-5"),
    ],
)
def test_the_timeout_counts_from_the_run_s_start_not_from_its_ranks(
    launcher: str, tmp_path: Path, slow_s: float, says: str
) -> None:
    """Placement: np<0. `slow_s` go before any rank starts, against timeout=4 (it is for the whole run): with 3 s
    the ranks get the 1 s left; with 5 s none is started. Either way the run ends in less than 4 s after that
    slow start (the timeout used to start over with the ranks). Each launcher stops the ranks started with 3 s;
    with 5 s no launcher is started, so one launcher shows it."""
    slow, started = SlowToStart(slow_s), tmp_path / "a rank started"
    runner = Runner(np=-2, launcher=launcher, timeout=4, observers=[slow], tracking=False, progress=False)
    with pytest.raises(RunTimeoutError, match="within timeout=4 s") as info:
        runner.run(touch_then_sleep, str(started))
    after_start = time.monotonic() - (slow.done_at or 0)
    assert after_start < 4, f"the run took {after_start:.1f} s after its slow start: its timeout started over"
    assert says in str(info.value)
    if slow_s > 4:
        assert not started.exists(), "a rank was started with no time left"


@pytest.mark.slow
def test_ctrl_c_on_the_driver_stops_every_rank(launcher: str, tmp_path: Path) -> None:
    """Placement: np<0. Ctrl-C during the second attempt of a retried run (its first attempt failed): the
    caller gets a KeyboardInterrupt, not an error that lists it, and no process of the run is left (/proc)."""
    proc = start_driver("sleeping_ranks", "-2", launcher, str(tmp_path))
    wait_for_line(proc, "rank started")
    assert leftover_rank_processes(), "the ranks should be running now"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert "RAISED KeyboardInterrupt" in out and "interrupted during attempt 1" in out, out
    assert "AttemptsFailedError" not in out, out
    assert leftover_rank_processes(grace_s=10) == {}


@pytest.mark.slow
def test_a_killed_driver_takes_its_ranks_with_it(launcher: str) -> None:
    proc = start_driver("sleeping_ranks", "-2", launcher)
    wait_for_line(proc, "rank started")
    proc.kill()
    proc.wait(timeout=30)
    assert leftover_rank_processes(grace_s=15) == {}
