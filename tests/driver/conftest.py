"""Placements and launchers every diagnostics test runs under (named in each test id)."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrunner.placement.slots import task_slots
from tests.waiting import wait_until


@pytest.fixture(params=["np-2-on-driver", "spark"])
def np2(request: pytest.FixtureRequest) -> int:
    """2 ranks: on the driver (np=-2), or in a barrier stage on local-cluster[2,1,1024] (np=2)."""
    if request.param == "spark":
        wait_for_both_executors(request.getfixturevalue("spark_cluster"))
        return 2
    return -2


def wait_for_both_executors(spark: Any, seconds: float = 120.0) -> None:
    """A failed mpirun run may cost an executor (that it does not is tests/runner/test_executor_survival.py's
    subject, not this suite's); Spark starts a new one: wait for it, so these tests see the cluster they ask for."""
    wait_until(lambda: task_slots(spark.sparkContext) >= 2, seconds, "two task slots")


def timeout_for(np: int) -> float:
    """Long enough for every rank to start and settle (Spark executors start slower on a busy machine)."""
    return 25.0 if np > 0 else 10.0
