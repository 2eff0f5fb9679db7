"""`BarrierTaskContext.get()` inside a rank answers as in its Spark barrier task: the task's facts,
Spark's task infos, and `barrier()` / `allGather()` across every rank of the run. Real `local-cluster[2,1,1024]`
(two executors, one slot each), launchers `direct` and `mpirun`; and np < 0, where there is no barrier task."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankFailedError
from tests.matrix import LAUNCHERS


def context_view() -> dict[str, Any]:
    """What a training function reads from `BarrierTaskContext.get()`, as spark-tensorflow-distributor's do."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    return {
        "is_barrier_context": isinstance(ctx, BarrierTaskContext),
        "partition": ctx.partitionId(),
        "stage": ctx.stageId(),
        "attempt": ctx.attemptNumber(),
        "task_attempt_id": ctx.taskAttemptId(),
        "cpus": ctx.cpus(),
        "resources": sorted(ctx.resources()),
        "addresses": [info.address for info in ctx.getTaskInfos()],
        "job_group": ctx.getLocalProperty("spark.jobGroup.id"),
    }


def spark_own_view(_: Any) -> Any:
    """The oracle: what Spark's own BarrierTaskContext says in a plain barrier stage of the same session."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    yield {
        "addresses": [info.address for info in ctx.getTaskInfos()],
        "cpus": ctx.cpus(),
        "stage": ctx.stageId(),
    }


def wait_and_gather(sleeper: int) -> dict[str, Any]:
    """Partition `sleeper` arrives late at the barrier; then every rank gathers a message naming itself."""
    import os

    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    partition = ctx.partitionId()
    if partition == sleeper:
        time.sleep(2)
    arrived = time.time()
    ctx.barrier()
    released = time.time()
    gathered = ctx.allGather(f"p{partition}-r{os.environ['RANK']}")
    again = ctx.allGather(str(partition))  # a second round: the rounds do not mix
    return {
        "partition": partition,
        "arrived": arrived,
        "released": released,
        "gathered": gathered,
        "again": again,
    }


def barrier_on_rank_zero_only() -> None:
    import os

    from pyspark import BarrierTaskContext

    if os.environ["RANK"] == "0":
        BarrierTaskContext.get().barrier()


def plain_barrier_get() -> None:
    from pyspark import BarrierTaskContext

    BarrierTaskContext.get()


@pytest.mark.spark
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_each_rank_reads_its_own_barrier_tasks_context(spark_cluster: Any, launcher: str) -> None:
    sc = spark_cluster.sparkContext
    oracle = sc.parallelize(range(2), 2).barrier().mapPartitions(spark_own_view).collect()
    views = Runner(np=2, launcher=launcher).run_all(context_view)
    assert all(v["is_barrier_context"] for v in views)
    assert sorted(v["partition"] for v in views) == [0, 1]
    # one barrier stage (a later one than the oracle's), its task infos as Spark gives them to its tasks: the
    # same two executors, in partition order (which partition lands on which executor is Spark's choice)
    assert len({v["stage"] for v in views}) == 1 and views[0]["stage"] > oracle[0]["stage"]
    assert len({tuple(v["addresses"]) for v in views}) == 1
    assert sorted(views[0]["addresses"]) == sorted(oracle[0]["addresses"])
    assert [v["cpus"] for v in views] == [oracle[0]["cpus"]] * 2
    assert [v["attempt"] for v in views] == [0, 0]
    assert len({v["task_attempt_id"] for v in views}) == 2
    assert [v["resources"] for v in views] == [[], []]  # no GPUs on this cluster
    # the job group Spark ran the ranks' stage in, as Spark's own status tracker knows it
    group = views[0]["job_group"]
    assert group and sc.statusTracker().getJobIdsForGroup(group)


@pytest.mark.spark
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_barrier_waits_for_the_late_rank_and_all_gather_is_in_partition_order(
    spark_cluster: Any, launcher: str
) -> None:
    views = Runner(np=2, launcher=launcher).run_all(wait_and_gather, sleeper=1)
    views.sort(key=lambda v: v["partition"])
    late = views[1]
    # ordering only: nobody left the barrier before the late rank arrived at it
    assert all(v["released"] >= late["arrived"] for v in views)
    rank_of = {v["partition"]: i for i, v in enumerate(views)}
    expected = [f"p{p}-r{rank_of[p]}" for p in (0, 1)]
    assert [v["gathered"] for v in views] == [expected, expected]
    assert [v["again"] for v in views] == [["0", "1"], ["0", "1"]]


@pytest.mark.spark
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_several_ranks_per_task_all_take_part(spark_cluster: Any, launcher: str) -> None:
    views = Runner(np=4, ranks_per_task=2, launcher=launcher).run_all(wait_and_gather, sleeper=0)
    partitions = [v["partition"] for v in views]
    assert sorted(partitions) == [0, 0, 1, 1]
    late_arrival = max(v["arrived"] for v in views if v["partition"] == 0)
    assert all(v["released"] >= late_arrival for v in views)
    # one message per rank, in partition order, then rank order
    expected = [f"p{p}-r{r}" for r, p in sorted(enumerate(partitions), key=lambda rp: (rp[1], rp[0]))]
    assert all(v["gathered"] == expected for v in views)


@pytest.mark.spark
def test_a_barrier_no_other_rank_reaches_times_out(spark_cluster: Any) -> None:
    runner = Runner(np=2, launcher="direct", env={"SPARKRUNNER_BARRIER_SYNC_TIMEOUT_S": "1"})
    with pytest.raises(RankFailedError) as failed:
        runner.run(barrier_on_rank_zero_only)
    assert failed.value.exc_type.endswith("BarrierSyncTimeoutError")
    assert "same number of barrier()/allGather() calls" in failed.value.exc_message


@pytest.mark.slow
def test_without_spark_there_is_no_barrier_task() -> None:
    with pytest.raises(RankFailedError) as failed:
        Runner(np=-1, launcher="direct").run(plain_barrier_get)
    assert "NOT_IN_BARRIER_STAGE" in failed.value.exc_message
