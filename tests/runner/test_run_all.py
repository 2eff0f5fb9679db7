"""`Runner.run_all`: every rank's return value in rank order; launchers `direct` and `mpirun`, np < 0 and Spark."""

from __future__ import annotations

import os
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankFailedError
from tests.matrix import LAUNCHERS


def rank_and_square(offset: int, *, scale: int = 1) -> dict[str, int]:
    rank = int(os.environ["RANK"])
    return {"rank": rank, "value": scale * (rank + offset) ** 2}


def fails_on_rank_one() -> int:
    if os.environ["RANK"] == "1":
        raise ValueError("rank one is broken")
    return 0


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_every_ranks_value_in_rank_order_on_the_driver(launcher: str) -> None:
    values = Runner(np=-3, launcher=launcher).run_all(rank_and_square, 1, scale=10)
    assert values == [{"rank": r, "value": 10 * (r + 1) ** 2} for r in range(3)]


def test_run_still_returns_rank_zero_only() -> None:
    assert Runner(np=-2, launcher="direct").run(rank_and_square, 3) == {"rank": 0, "value": 9}


@pytest.mark.slow
def test_a_failing_rank_fails_run_all() -> None:
    with pytest.raises(RankFailedError, match="rank one is broken") as info:
        Runner(np=-2, launcher="direct").run_all(fails_on_rank_one)
    assert info.value.rank == 1


@pytest.mark.spark
def test_every_ranks_value_from_a_barrier_stage(spark_local: Any) -> None:
    values = Runner(np=2, launcher="direct").run_all(rank_and_square, 2)
    assert values == [{"rank": 0, "value": 4}, {"rank": 1, "value": 9}]
