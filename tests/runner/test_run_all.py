"""`Runner.run_all`: every rank's return value in rank order; launchers `direct` and `mpirun`, np < 0 and Spark."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankFailedError
from sparkrunner.observe.events import LaunchEvent
from sparkrunner.observe.observers import RunObserver
from tests.matrix import LAUNCHERS


def rank_and_square(offset: int, *, scale: int = 1) -> dict[str, int]:
    rank = int(os.environ["RANK"])
    return {"rank": rank, "value": scale * (rank + offset) ** 2}


def fails_on_rank_one() -> int:
    if os.environ["RANK"] == "1":
        raise ValueError("rank one is broken")
    return 0


class Launches(RunObserver):
    """Each rank's launch times, bracketed by this driver's own monotonic clock (one clock on one host)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.seen: dict[int, tuple[LaunchEvent, float]] = {}

    def on_start(self, record: Any) -> None:
        self.started = time.monotonic()

    def on_rank_launch(self, rank: int, launch: LaunchEvent) -> None:
        self.seen[rank] = (launch, time.monotonic())

    def assert_ordered(self, ranks: int, in_task: bool) -> None:
        """Every rank's points happened in launch order, after the run started and before its hello arrived
        (the task's points only where a barrier task started it)."""
        assert sorted(self.seen) == list(range(ranks))
        for launch, arrived in self.seen.values():
            task = [launch.task_entered, launch.addresses_exchanged]
            assert all(t is not None for t in task) if in_task else task == [None, None]
            points = [
                self.started,
                *(task if in_task else []),
                launch.spawned,
                launch.interpreter_up,
                launch.imports_done,
                launch.connected,
                arrived,
            ]
            assert points == sorted(points)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_ranks_value_in_rank_order_on_the_driver(launcher: str) -> None:
    values = Runner(np=-3, launcher=launcher).run_all(rank_and_square, 1, scale=10)
    assert values == [{"rank": r, "value": 10 * (r + 1) ** 2} for r in range(3)]


def test_run_still_returns_rank_zero_only() -> None:
    launches = Launches()
    assert Runner(np=-2, launcher="direct", observers=[launches]).run(rank_and_square, 3) == {
        "rank": 0,
        "value": 9,
    }
    launches.assert_ordered(2, in_task=False)


@pytest.mark.slow
def test_a_failing_rank_fails_run_all() -> None:
    with pytest.raises(RankFailedError, match="rank one is broken") as info:
        Runner(np=-2, launcher="direct").run_all(fails_on_rank_one)
    assert info.value.rank == 1


@pytest.mark.spark
def test_every_ranks_value_from_a_barrier_stage(spark_local: Any) -> None:
    launches = Launches()
    values = Runner(np=2, launcher="direct", observers=[launches]).run_all(rank_and_square, 2)
    assert values == [{"rank": 0, "value": 4}, {"rank": 1, "value": 9}]
    launches.assert_ordered(2, in_task=True)  # local[2]: the tasks run on the driver's host, one clock
