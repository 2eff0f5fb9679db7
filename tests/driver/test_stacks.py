"""Every live rank's Python stack on the driver: on a run timeout, a stall, and on demand (dump_stacks)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RunTimeoutError, StallError
from sparkrunner.observe.observers import RunObserver
from tests.driver.conftest import timeout_for
from tests.driver.functions import all_reduce_with_a_stopped_peer, rank_one_stuck_here
from tests.matrix import LAUNCHERS

MPIRUN = LAUNCHERS[1].marks
"""Where a cell runs mpirun: skipped on a machine without it."""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("np2", "launcher"),
    [
        pytest.param("np-2-on-driver", "direct", id="np-2-on-driver-direct"),
        pytest.param("spark", "mpirun", id="spark-mpirun", marks=MPIRUN),
    ],
    indirect=["np2"],
)
def test_run_timeout_names_where_each_rank_is(np2: int, launcher: str) -> None:
    """Stacks travel over the channel whatever the placement and launcher; what differs is how the timed-out
    attempt ends (a placement's ranks killed on the driver or a barrier stage cancelled; the launcher's process
    tree): each placement and each launcher once, the other two pairs in the stopped-peer test below."""
    runner = Runner(np=np2, launcher=launcher, timeout=timeout_for(np2), tracking=False)
    with pytest.raises(RunTimeoutError) as info:
        runner.run(rank_one_stuck_here)
    text = str(info.value)
    assert "rank 1: in stuck_here" in text
    assert "rank 0: in rank_one_stuck_here" in text
    report = info.value.stack_report
    assert report is not None
    threads = report.ranks[1].threads or ""
    assert "in rank_one_stuck_here" in threads and "in stuck_here" in threads
    assert report.ranks[0].output_tail == ["rank 0 is up"]
    assert "stuck_here" in info.value.artifacts["stacks.txt"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("np2", "launcher"),
    [
        pytest.param("np-2-on-driver", "mpirun", id="np-2-on-driver-mpirun", marks=MPIRUN),
        pytest.param("spark", "direct", id="spark-direct"),
    ],
    indirect=["np2"],
)
def test_a_rank_blocked_in_gloo_all_reduce_and_its_stopped_peer(np2: int, launcher: str) -> None:
    """The pairs of placement and launcher the run-timeout test above does not run: a stopped rank is found
    in the driver machine's process table whichever started it, and ends on a stop of its placement (a stopped
    rank on every pair: tests/scenarios/faults/test_fault_matrix.py)."""
    runner = Runner(np=np2, launcher=launcher, timeout=timeout_for(np2) + 10, tracking=False)
    with pytest.raises(RunTimeoutError) as info:
        runner.run(all_reduce_with_a_stopped_peer)
    lines = {line.split(":")[0].strip(): line for line in str(info.value).splitlines() if ": " in line}
    assert "in all_reduce" in lines["rank 0"]
    assert "all_reduce_with_a_stopped_peer" in lines["rank 0"]
    assert "did not answer" in lines["rank 1"] and "stopped" in lines["rank 1"]
    report = info.value.stack_report
    assert report is not None and report.ranks[1].threads is None


@pytest.mark.slow
def test_stall_watchdog_fails_with_every_ranks_stack() -> None:
    runner = Runner(np=-2, launcher="direct", stall_timeout=3, on_stall="fail", timeout=120, tracking=False)
    with pytest.raises(StallError) as info:
        runner.run(rank_one_stuck_here)
    assert "stall_timeout" in str(info.value)
    assert "rank 1: in stuck_here" in str(info.value)


class _ReleaseOnWarning(logging.Handler):
    """Touches `release` once the stall warning is logged, so the stuck rank goes on as soon as it was shown."""

    def __init__(self, release: Path) -> None:
        super().__init__(logging.WARNING)
        self._release = release

    def emit(self, record: logging.LogRecord) -> None:
        if "reported progress for" in record.getMessage():
            self._release.touch()


@pytest.mark.slow
def test_stall_watchdog_warns_and_keeps_running(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The warning must come within 8 s of the run's start: the ranks are released then at the latest."""
    release = tmp_path / "release"
    latest = threading.Timer(8.0, release.touch)
    latest.start()
    logger, handler = logging.getLogger("sparkrunner"), _ReleaseOnWarning(release)
    logger.addHandler(handler)
    try:
        runner = Runner(np=-2, launcher="mpirun", stall_timeout=3, on_stall="warn", tracking=False)
        assert runner.run(rank_one_stuck_here, str(release)) == "done"
    finally:
        logger.removeHandler(handler)
        latest.cancel()
    err = caplog.text  # the warning goes to the sparkrunner logger
    assert "no rank printed or reported progress for 3 s" in err
    assert "rank 1: in stuck_here" in err


class _RanksUp(RunObserver):
    """Sets `all_up` once every rank printed "rank N is up" (`rank_one_stuck_here`'s first line)."""

    def __init__(self, ranks: int) -> None:
        self._waiting = set(range(ranks))
        self.all_up = threading.Event()

    def on_rank_output(self, rank: int, stream: str, lines: list[str]) -> None:
        if f"rank {rank} is up" in lines:
            self._waiting.discard(rank)
        if not self._waiting:
            self.all_up.set()


def test_dump_stacks_from_another_thread_while_the_run_is_in_flight(
    np2: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    release = tmp_path / "release"
    # the active session is thread-local: a run started in another thread is given it
    spark = request.getfixturevalue("spark_cluster") if np2 > 0 else None
    up = _RanksUp(2)
    runner = Runner(np=np2, spark=spark, launcher="direct", timeout=180, tracking=False, observers=[up])
    outcome: list[object] = []
    thread = threading.Thread(target=lambda: outcome.append(runner.run(rank_one_stuck_here, str(release))))
    thread.start()
    try:
        in_flight = runner.wait_in_flight(timeout=120)
        assert sorted(r.rank for r in in_flight.ranks) == [0, 1] and all(r.pid > 0 for r in in_flight.ranks)
        assert up.all_up.wait(120), "the ranks never printed that they are up"
        summary = ""
        expected = ("rank 1: in stuck_here", "rank 0: in rank_one_stuck_here")
        for _ in range(5):  # rank 1 enters stuck_here right after its line: a first ask may come just before
            summary = runner.dump_stacks().summary()
            if all(e in summary for e in expected):
                break
        assert "rank 1: in stuck_here" in summary
        assert "rank 0: in rank_one_stuck_here" in summary
    finally:
        release.touch()
        thread.join(180)
    assert outcome == ["done"]
