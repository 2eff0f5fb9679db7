"""np > 0 on a real `local[2]` SparkSession: barrier stage, peers, errors, slots, timeouts, Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import (
    NotEnoughSlotsError,
    NotPicklableError,
    RankFailedError,
    StartTimeoutError,
)
from sparkrunner.placement.background_job import BackgroundJob
from tests.helpers import leftover_rank_processes, run_driver, start_driver, wait_for_line
from tests.waiting import wait_until


def rank_view() -> dict[str, Any]:
    keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
    env = {k: os.environ[k] for k in keys}
    env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    print("view", " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    return env


def test_barrier_stage_returns_rank_zero_and_wires_every_rank(
    spark_local: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    view = Runner(np=2).run(rank_view)
    assert view["RANK"] == "0" and view["WORLD_SIZE"] == "2"
    assert view["CUDA_VISIBLE_DEVICES"] == "", "a task without GPUs must see an explicit empty list"
    out = capsys.readouterr().out
    for r in range(2):
        assert f"[rank {r}] view" in out
        assert f"LOCAL_RANK={r} LOCAL_WORLD_SIZE=2" in out
        assert f"MASTER_PORT={view['MASTER_PORT']}" in out


def raises_on_rank_zero() -> None:
    if os.environ["RANK"] == "0":
        raise KeyError("missing column 'label'")
    time.sleep(600)


def test_exception_round_trip_through_spark(spark_local: Any) -> None:
    with pytest.raises(RankFailedError) as info:
        Runner(np=2).run(raises_on_rank_zero)
    assert info.value.rank == 0
    assert info.value.exc_type == "KeyError"
    assert "in raises_on_rank_zero" in info.value.remote_traceback
    assert isinstance(info.value.original, KeyError)


def test_more_ranks_than_slots_is_refused_with_the_slot_count(spark_local: Any) -> None:
    with pytest.raises(NotEnoughSlotsError, match=r"np=3 .* has 2\b"):
        Runner(np=3).run(rank_view)


def test_captured_spark_session_is_named(spark_local: Any) -> None:
    spark = spark_local

    def train() -> int:
        return spark.range(3).count()

    with pytest.raises(NotPicklableError, match=r"'spark' .*SparkSession"):
        Runner(np=2).run(train)


def test_start_timeout_when_the_cluster_is_busy(spark_local: Any) -> None:
    """One of the two slots is taken by another job: the barrier stage cannot start, and we say so."""
    sc = spark_local.sparkContext
    blocker_started = threading.Event()

    def occupy() -> None:
        sc.setJobGroup("blocker", "holds one slot", interruptOnCancel=True)
        blocker_started.set()
        with contextlib.suppress(Exception):
            sc.parallelize([0], 1).map(lambda _: time.sleep(120)).collect()

    thread = threading.Thread(target=occupy)
    thread.start()
    assert blocker_started.wait(10)
    tracker = sc.statusTracker()
    wait_until(
        lambda: any(
            getattr(tracker.getStageInfo(s), "numActiveTasks", 0) for s in tracker.getActiveStageIds()
        ),
        60,
        "the blocker's task running in its slot",
    )
    try:
        with pytest.raises(StartTimeoutError, match="only 0 of 2 ranks started within start_timeout=5"):
            Runner(np=2, start_timeout=5).run(rank_view)
    finally:
        sc.cancelJobGroup("blocker")
        thread.join(60)
    assert Runner(np=2).run(rank_view)["WORLD_SIZE"] == "2", "the cluster must be usable afterwards"


@pytest.mark.spark  # a Spark driver in the subprocess
def test_ctrl_c_cancels_the_spark_job_and_every_rank(tmp_path: Path) -> None:
    """Placement: Spark local[2], launcher direct. Ctrl-C during the second attempt of a retried run: the
    caller gets a KeyboardInterrupt, and no process of the run is left (/proc)."""
    proc = start_driver("sleeping_ranks", "2", "direct", str(tmp_path))
    wait_for_line(proc, "rank started", seconds=180)
    proc.send_signal(2)
    out, _ = proc.communicate(timeout=120)
    assert "RAISED KeyboardInterrupt" in out and "interrupted during attempt 1" in out, out
    assert "AttemptsFailedError" not in out, out
    assert leftover_rank_processes(grace_s=15) == {}


@pytest.mark.spark  # a Spark driver in the subprocess
def test_dynamic_allocation_is_refused_before_launch() -> None:
    out = run_driver("dynamic_allocation")
    assert "REFUSED: spark.dynamicAllocation.enabled is true" in out, out


def test_a_stop_that_comes_before_the_job_reaches_spark_still_cancels_it(spark_local: Any) -> None:
    """Placement: local[2], the background thread that runs a run's Spark job (`placement.background_job`), stopped
    while it has set its job group but not yet submitted the job (a run that timed out as it started: the pause
    below holds that moment open). A single cancel then cancels nothing, and the job would run on."""
    sc = spark_local.sparkContext
    group = f"stopped-before-submission-{os.getpid()}"
    grouped = threading.Event()

    def collect() -> list[dict[str, object]]:
        sc.setJobGroup(group, "stopped before it was submitted", interruptOnCancel=True)
        grouped.set()
        time.sleep(1.5)
        return sc.parallelize([0, 1], 2).map(lambda x: {"slept": time.sleep(120) or x}).collect()

    job = BackgroundJob("stopped-before-submission", collect, lambda: sc.cancelJobGroup(group))
    assert grouped.wait(30)
    try:
        job.stop()
        assert job.finished(), "the job still runs after stop(): its cancel came before the job and was lost"
        assert "(cancelJobGroup)" in (job.cancelled() or ""), job.failure()
        assert all(
            sc.statusTracker().getJobInfo(i).status == "FAILED"
            for i in sc.statusTracker().getJobIdsForGroup(group)
        ), "Spark does not show the job as cancelled"
    finally:
        sc.cancelJobGroup(group)
