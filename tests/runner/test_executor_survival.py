"""A failed, timed-out or cancelled run must end its barrier tasks cleanly and leave every executor alive.

Spark kills the executor when a task is cancelled while it waits in BarrierTaskContext.barrier(); that used
to happen on every failed mpirun run ("Lost executor N: Command exited with code 50"). Real local-cluster
executors; the oracle is the driver JVM's own list of executor ids.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankFailedError, RunTimeoutError
from tests.matrix import LAUNCHERS
from tests.recovery.processes import executor_jvm_of
from tests.waiting import wait_until


def executor_ids(spark: Any) -> list[str]:
    """Executor ids the driver knows, as Spark itself reports them (the driver's own id excluded)."""
    listed = spark.sparkContext._jsc.sc().getExecutorIds().mkString(",")
    return sorted(i for i in listed.split(",") if i)


def _own_executor_jvm(_: Any) -> list[int]:
    return [executor_jvm_of(os.getpid())]


def executor_jvms(spark: Any) -> list[int]:
    """The executor JVMs (pids) that a two-task barrier stage runs on: both executors must be up to run it."""
    rdd = spark.sparkContext.parallelize(range(2), 2).barrier().mapPartitions(_own_executor_jvm)
    return sorted(rdd.collect())


def rank_one_fails_rank_zero_works_on() -> None:
    import os
    import time

    if os.environ["RANK"] == "1":
        raise ValueError("rank 1 fails on purpose")
    time.sleep(60)


def every_rank_hangs() -> None:
    import time

    time.sleep(60)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_three_failed_runs_in_a_row_keep_every_executor(spark_cluster: Any, launcher: str) -> None:
    """Spark placement (np=2, local-cluster), each launcher: a rank error, a timeout, a rank error."""
    wait_until(lambda: len(executor_ids(spark_cluster)) == 2, 60, "2 executors")
    before = executor_ids(spark_cluster)
    jvms = executor_jvms(spark_cluster)
    runs = [
        (rank_one_fails_rank_zero_works_on, {}, RankFailedError),
        (every_rank_hangs, {"timeout": 5}, RunTimeoutError),
        (rank_one_fails_rank_zero_works_on, {}, RankFailedError),
    ]
    for fn, options, expected in runs:
        with pytest.raises(expected):
            Runner(np=2, launcher=launcher, tracking=False, **options).run(fn)
    # a barrier stage of two tasks runs only on two live executors: the same JVMs as before, or one was lost
    assert executor_jvms(spark_cluster) == jvms, "a failed run cost an executor JVM"
    assert executor_ids(spark_cluster) == before, "a failed run cost an executor"
