"""Spark placement (np > 0): one barrier stage of np tasks, each of which starts its share of the ranks."""

from __future__ import annotations

import re
import threading
import uuid
from typing import Any

from sparkrunner import gpus
from sparkrunner.errors import BarrierModeUnsupportedError
from sparkrunner.launch import Launcher, RankJob
from sparkrunner.placement.barrier_task import barrier_partition_fn
from sparkrunner.placement.slots import wait_for_slots

_STOP_JOIN_S = 60.0
_PYTHON_EXCEPTION_LINE = re.compile(
    r"(?!org\.apache\.|java\.|scala\.|py4j\.)[A-Za-z_][\w.]*(Error|Exception): "
)


def spark_context(spark: Any) -> Any:
    try:
        return spark.sparkContext
    except Exception as exc:  # Spark Connect sessions have no SparkContext
        raise BarrierModeUnsupportedError(
            "this SparkSession has no SparkContext (Spark Connect?); barrier stages need a classic session"
        ) from exc


class SparkPlacement:
    def __init__(
        self, spark: Any, num_ranks: int, launcher: Launcher, slot_wait_s: float, use_gpu: bool | None = None
    ) -> None:
        self._sc = spark_context(spark)
        self._use_gpu = use_gpu
        self._num_ranks = num_ranks
        self._launcher = launcher
        self._slot_wait_s = slot_wait_s
        conf = self._sc.getConf()
        self.driver_host = str(conf.get("spark.driver.host", "127.0.0.1"))
        # the driver channel listens where Spark's driver does, not on every interface
        self.bind_host = str(conf.get("spark.driver.bindAddress", self.driver_host))
        self._group = f"sparkrunner-{uuid.uuid4().hex[:12]}"
        self._thread: threading.Thread | None = None
        self._records: list[dict[str, object]] = []
        self._job_error: BaseException | None = None

    def check(self) -> None:
        conf = self._sc.getConf()
        refuse_dynamic_allocation(conf.get("spark.dynamicAllocation.enabled", "false"))
        self._launcher.check_available()
        if self._use_gpu:
            gpus.require_spark_gpus(float(conf.get("spark.task.resource.gpu.amount", "0")))
        wait_for_slots(self._sc, self._num_ranks, self._slot_wait_s)

    def start(self, job: RankJob) -> None:
        self._thread = threading.Thread(target=self._run_job, args=(job,), name=self._group, daemon=True)
        self._thread.start()

    def _run_job(self, job: RankJob) -> None:
        sc = self._sc
        sc.setJobGroup(self._group, f"sparkrunner run {job.run_id}", interruptOnCancel=True)
        try:
            rdd = sc.parallelize(range(self._num_ranks), self._num_ranks)
            self._records = rdd.barrier().mapPartitions(barrier_partition_fn(job, self._launcher)).collect()
        except BaseException as exc:
            self._job_error = exc

    def failure(self, pid: int | None = None) -> str | None:
        return describe_failure(self._job_error, self._records)

    def finished(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._thread.is_alive():
            self._sc.cancelJobGroup(self._group)
        self._thread.join(_STOP_JOIN_S)


def refuse_dynamic_allocation(enabled: str | None) -> None:
    """Barrier stages and dynamic allocation do not mix: refuse before anything starts."""
    if str(enabled).lower() == "true":
        raise BarrierModeUnsupportedError(
            "spark.dynamicAllocation.enabled is true, and Spark cannot run barrier stages with dynamic "
            "allocation. Turn it off for this cluster (or use a fixed-size cluster) and try again."
        )


def describe_failure(job_error: BaseException | None, records: list[dict[str, object]]) -> str | None:
    """Why a barrier stage's ranks ended abnormally: the job's error, or the first task's non-zero exit."""
    if job_error is not None:
        return f"the Spark barrier stage failed: {_short_spark_error(job_error)}"
    for record in records:
        if record["exit_code"] != 0:
            return (
                f"barrier task {record['index']} ended with exit code {record['exit_code']}; "
                f"its last output:\n{record['tail']}"
            )
    return None


def _short_spark_error(exc: BaseException) -> str:
    text = str(exc)
    if "No module named 'sparkrunner'" in text:
        return (
            "the executors' Python cannot import sparkrunner. Install it where the executors run, or point "
            "them at this environment's interpreter (PYSPARK_PYTHON, set before the SparkSession starts)."
        )
    lines = text.splitlines()
    # the Python exception a task raised (its traceback's last line) says more than the JVM's wrapper of it
    python_line = next((line for line in lines if _PYTHON_EXCEPTION_LINE.match(line)), None)
    if python_line is not None:
        return python_line.strip()[:2000]
    for line in lines:
        if "Exception" in line or "Error" in line:
            return line.strip()[:2000]
    return text[:2000]
