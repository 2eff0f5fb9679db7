"""Warm sessions (`Runner.session()`): later runs reuse the rank processes, a failed run is attributed as in
a cold run and never poisons the next (its ranks are replaced), output reaches the run it belongs to, and an
idle session stops its ranks. Every placement and launcher, named explicitly (tests/matrix.py)."""

from __future__ import annotations

import os

import pytest

from sparkrunner import Runner, RunObserver
from sparkrunner.errors import RankFailedError
from sparkrunner.ranks.warm_relay import END_OF_RUN
from sparkrunner.system.processes import proc_stat
from tests.matrix import Placement
from tests.waiting import wait_until


def pid_and(value: int) -> tuple[int, int, str | None]:
    """This rank's process, the value, and what it printed (tagged with the value, so each run has its own)."""
    from sparkrunner import rank_context
    from sparkrunner.common.environment import Env

    print(f"run {value} on rank {rank_context().rank}", flush=True)
    return os.getpid(), value * value, os.environ.get(Env.RESULTS)


def fail_on_rank(bad: int) -> None:
    from sparkrunner import rank_context

    if rank_context().rank == bad:
        raise ValueError(f"rank {bad} was told to fail")


class Lines(RunObserver):
    """Every line the ranks printed, as the driver received it."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def on_rank_output(self, rank: int, stream: str, lines: list[str]) -> None:
        self.lines.extend(lines)


def started_at(pid: int) -> tuple[int, int | None]:
    """`pid` with its start time (None once gone), which tells it apart from a later process given its pid."""
    stat = proc_stat(pid)
    return pid, None if stat is None else stat.start_ticks


def alive(process: tuple[int, int | None]) -> bool:
    """That process is running (a zombie waiting for its parent to reap it has ended)."""
    pid, start_ticks = process
    stat = proc_stat(pid)
    return stat is not None and stat.start_ticks == start_ticks and stat.state != "Z"


@pytest.mark.slow
def test_a_session_reuses_its_ranks_and_replaces_them_after_a_failure(
    placement: Placement, launcher: str
) -> None:
    seen = Lines()
    runner = Runner(
        np=placement.np(2), spark=placement.spark, launcher=launcher, tracking=False, progress=False,
        observers=[seen], start_timeout=180,
    )  # fmt: skip
    with runner.session() as session:
        first = session.run_all(pid_and, 2)
        second = session.run(pid_and, 3)
        assert [value for _, value, _ in first] == [4, 4] and second[1] == 9
        assert [results for _, _, results in first] == ["all", "all"]  # run_all's variable...
        assert second[2] is None  # ...was the first run's only
        pids = [pid for pid, _, _ in first]
        assert second[0] == pids[0], "the second run must run in the first run's rank 0 process"
        assert sorted(seen.lines) == [
            "run 2 on rank 0",
            "run 2 on rank 1",
            "run 3 on rank 0",
            "run 3 on rank 1",
        ]

        with pytest.raises(RankFailedError) as failed:
            session.run(fail_on_rank, 1)
        assert failed.value.rank == 1 and failed.value.exc_type == "ValueError"
        assert "rank 1 was told to fail" in str(failed.value)

        third = session.run_all(pid_and, 4)
        assert [value for _, value, _ in third] == [16, 16]
        assert not set(pids) & {pid for pid, _, _ in third}, "a failed run's ranks must be replaced"
        assert session.launches == 2
        ranks = [started_at(pid) for pid, _, _ in third]
    assert not any(alive(rank) for rank in ranks), "closing the session must end its ranks"
    assert not any(END_OF_RUN in line for line in seen.lines)


@pytest.mark.slow
def test_an_idle_session_stops_its_ranks_and_the_next_run_starts_new_ones() -> None:
    runner = Runner(np=-1, launcher="direct", tracking=False, progress=False)
    session = runner.session(idle_timeout=0.5)  # a notebook's long-lived session, closed by hand
    try:
        rank = started_at(session.run(pid_and, 1)[0])
        wait_until(lambda: not session.warm, 60, "the idle session stopping its ranks")
        assert not alive(rank)
        assert session.run(pid_and, 2)[1] == 4 and session.launches == 2
    finally:
        session.close()
    assert not session.warm


def test_a_closed_session_or_pool_refuses_runs_and_bad_arguments_are_refused() -> None:
    from sparkrunner.errors import InvalidArgumentError, SparkRunnerError

    runner = Runner(np=-1, launcher="direct", tracking=False, progress=False)
    with pytest.raises(InvalidArgumentError, match="idle_timeout"):
        runner.session(idle_timeout=0)
    session = runner.session()
    session.close()
    with pytest.raises(SparkRunnerError, match="closed"):
        session.run(pid_and, 1)
    with pytest.raises(InvalidArgumentError, match=r"size must be an int >= 1 \(the number of warm sessions"):
        runner.session_pool(0)
    pool = runner.session_pool(2)
    pool.close()
    with pytest.raises(SparkRunnerError, match="session pool is closed"):
        pool.run(pid_and, 1)
