"""Spark placement (np > 0): one barrier stage of np tasks, each of which starts its share of the ranks."""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any

from sparkrunner.common.rank_job import RankJob
from sparkrunner.errors import BarrierModeUnsupportedError
from sparkrunner.launch import Launcher
from sparkrunner.placement.admission import Admission, gate_for
from sparkrunner.placement.background_job import BackgroundJob, StageHolder
from sparkrunner.placement.decommission import DecommissionWatch
from sparkrunner.placement.slots import wait_for_slots
from sparkrunner.placement.spark_sessions import (
    context_conf,
    executors_print_to_this_console,
    task_resource_amount,
)
from sparkrunner.system import gpus
from sparkrunner.tasks.barrier_task import barrier_partition_fn

log = logging.getLogger(__name__)


def spark_context(spark: Any) -> Any:
    try:
        return spark.sparkContext
    except Exception as exc:  # Spark Connect sessions have no SparkContext
        raise BarrierModeUnsupportedError(
            "this SparkSession has no SparkContext (Spark Connect?); barrier stages need a classic session"
        ) from exc


def job_description(
    function: str, np: int, launcher: str, run_id: str, mlflow_run_id: str | None, later: str
) -> str:
    """A run's barrier job in Spark's UI: what runs, how, its MLflow run, sparkrunner's run id and, after the
    first, the attempt's id (`later`; empty for the first attempt)."""
    mlflow = "" if mlflow_run_id is None else f" mlflow={mlflow_run_id}"
    attempt = later and f" attempt={later}"
    return f"sparkrunner: {function} np={np} launcher={launcher}{mlflow} run={run_id}{attempt}"


def check_spark(
    spark: Any, num_tasks: int, launcher: Launcher, slot_wait_s: float, use_gpu: bool | None
) -> None:
    """Raise a typed error before anything starts when a barrier stage of `num_tasks` cannot run in this session
    (waiting up to `slot_wait_s` for its slots)."""
    sc = spark_context(spark)
    check_barrier_stage(
        context_conf(sc).get("spark.dynamicAllocation.enabled", "false"), spark, launcher, use_gpu
    )
    wait_for_slots(sc, num_tasks, slot_wait_s)


class SparkPlacement(StageHolder):
    def __init__(self, spark: Any, num_tasks: int, launcher: Launcher) -> None:
        self._spark = spark
        self._sc = spark_context(spark)
        self._num_tasks = num_tasks
        self._launcher = launcher
        conf = context_conf(self._sc)
        self.driver_host = str(conf.get("spark.driver.host", "127.0.0.1"))
        # the driver channel listens where Spark's driver does, not on every interface
        self.bind_host = str(conf.get("spark.driver.bindAddress", self.driver_host))
        self.job_group = f"sparkrunner-{uuid.uuid4().hex[:12]}"
        self._job: BackgroundJob | None = None
        self._admission: Admission | None = None
        self._decommission = DecommissionWatch(self._sc)

    def start(self, job: RankJob, description: str = "") -> None:
        # in order of arrival, all slots or none: concurrent runs of this driver queue here, not in Spark
        self._admission = gate_for(self._sc).admit(self._num_tasks, job.run_id)
        job = replace(job, echo_output=not executors_print_to_this_console(self._spark))
        self._job = BackgroundJob(self.job_group, lambda: self._collect(job, description), self._cancel)

    def _collect(self, job: RankJob, description: str) -> list[dict[str, object]]:
        sc = self._sc
        sc.setJobGroup(self.job_group, description, interruptOnCancel=True)
        rdd = sc.parallelize(range(self._num_tasks), self._num_tasks)
        log.debug("submitting the barrier stage of attempt %s (%d tasks)", job.attempt_id, self._num_tasks)
        return list(rdd.barrier().mapPartitions(barrier_partition_fn(job, self._launcher)).collect())

    def _cancel(self) -> None:
        self._sc.cancelJobGroup(self.job_group)

    def stop(self) -> None:
        super().stop()
        if self._admission is not None:
            self._admission.release()

    def exit_code(self, rank: int, pid: int | None) -> int | None:
        return None  # the barrier tasks report their ranks' exits (`Message.TASK_REPORT`)

    def failure(self, pid: int | None = None) -> str | None:
        return None if self._job is None else self._job.failure()

    def decommissioning(self, spark_task_ids: dict[int, int]) -> str | None:
        return self._decommission.check(spark_task_ids)


def check_barrier_stage(
    dynamic_allocation: str | None, spark: Any, launcher: Launcher, use_gpu: bool | None
) -> None:
    """What a barrier stage needs, classic or Connect, refused before anything starts: no dynamic allocation
    (`dynamic_allocation`, the session's setting: barrier stages and dynamic allocation do not mix), a launcher that
    runs here, and GPUs on each task when the run asks for them."""
    if str(dynamic_allocation).lower() == "true":
        raise BarrierModeUnsupportedError(
            "spark.dynamicAllocation.enabled is true, and Spark cannot run barrier stages with dynamic "
            "allocation. Turn it off for this cluster (or use a fixed-size cluster) and try again."
        )
    launcher.check_available()
    if use_gpu:
        gpus.require_spark_gpus(task_resource_amount(spark))
