"""Spark Connect placement (np > 0 on a ``SparkSession.builder.remote(...)`` session).

A Connect client has no SparkContext: the barrier stage is a ``mapInArrow(..., barrier=True)`` over ``np``
rows, the run is cancelled through a job tag (``addTag`` / ``interruptTag``), and the task slots are known
only when the master's name tells them (``local[N]``, ``local-cluster[...]``); otherwise `start_timeout`
bounds the wait. The ranks dial back to the driver channel in this (client) process, so the executors must
be able to reach this machine: `DRIVER_HOST_ENV` names the address to give them when the one this client
uses to reach the Connect server is not it.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import RankJob
from sparkrunner.launch import Launcher
from sparkrunner.placement.background_job import BackgroundJob, StageHolder
from sparkrunner.placement.slots import session_slots, too_few_slots
from sparkrunner.placement.spark import check_barrier_stage
from sparkrunner.placement.spark_sessions import executors_print_to_this_console
from sparkrunner.tasks.barrier_task import run_barrier_task

RECORD_SCHEMA = "index long, exit_code long, tail string, swept string"
_UNREACHABLE = "cannot reach the driver at"


def client_address(server_host: str) -> str:
    """The address of this machine on the route to the Connect server ($SPARKRUNNER_DRIVER_HOST wins)."""
    configured = os.environ.get(Env.DRIVER_HOST)
    if configured:
        return configured
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((socket.gethostbyname(server_host), 9))  # UDP: picks a route, sends nothing
            return str(probe.getsockname()[0])
        except OSError:
            return socket.gethostbyname(socket.gethostname())


def session_client_address(spark: Any) -> str:
    """The address the executors of Spark Connect session `spark` reach this client at."""
    return client_address(str(getattr(spark._client, "host", "localhost")))


def barrier_arrow_fn(job: RankJob, launcher: Launcher):  # type: ignore[no-untyped-def]
    """The mapInArrow function of one barrier task: run its ranks, return one record batch."""

    def run(_: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for record in run_barrier_task(job, launcher):
            yield pa.RecordBatch.from_pylist([{**record, "swept": str(record["swept"])}])

    return run


def check_connect(spark: Any, num_tasks: int, launcher: Launcher, use_gpu: bool | None) -> None:
    """Raise a typed error before anything starts when a barrier stage of `num_tasks` cannot run over this
    Connect session."""
    check_barrier_stage(spark.conf.get("spark.dynamicAllocation.enabled", "false"), spark, launcher, use_gpu)
    slots = session_slots(spark)
    if slots is not None and slots < num_tasks:
        raise too_few_slots(num_tasks, slots, "")


class ConnectPlacement(StageHolder):
    bind_host = "0.0.0.0"

    def __init__(self, spark: Any, num_tasks: int, launcher: Launcher) -> None:
        self._spark = spark
        self._num_tasks = num_tasks
        self._launcher = launcher
        self.driver_host = session_client_address(spark)
        self.job_group = f"sparkrunner-{uuid.uuid4().hex[:12]}"
        self._job: BackgroundJob | None = None

    def start(self, job: RankJob, description: str = "") -> None:
        job = replace(job, echo_output=not executors_print_to_this_console(self._spark))
        self._job = BackgroundJob(
            self.job_group,
            lambda: self._collect(job, description),
            lambda: self._spark.interruptTag(self.job_group),
        )

    def _collect(self, job: RankJob, description: str) -> list[dict[str, object]]:
        # tags are per thread: only this job carries them; Connect has no job description, so a second tag
        # (no commas allowed) names the run in Spark's UI
        tags = [self.job_group, description.replace(",", ";")]
        for tag in tags:
            self._spark.addTag(tag)
        try:
            frame = self._spark.range(0, self._num_tasks, 1, self._num_tasks)
            rows = frame.mapInArrow(
                barrier_arrow_fn(job, self._launcher), RECORD_SCHEMA, barrier=True
            ).collect()
            return [row.asDict() for row in rows]
        finally:
            for tag in tags:
                self._spark.removeTag(tag)

    def exit_code(self, rank: int, pid: int | None) -> int | None:
        return None  # the barrier tasks report their ranks' exits (`Message.TASK_REPORT`)

    def failure(self, pid: int | None = None) -> str | None:
        detail = None if self._job is None else self._job.failure()
        if detail is not None and _UNREACHABLE in detail:
            detail += (
                f"\n\nThe executors could not connect to this Spark Connect client at {self.driver_host}: "
                f"sparkrunner's ranks report to the process that called run(). Run the client where the "
                f"executors can reach it (a notebook on the cluster, or the same network), or set "
                f"{Env.DRIVER_HOST} to an address of this machine that they can reach."
            )
        return detail

    def decommissioning(self, spark_task_ids: dict[int, int]) -> str | None:
        return None  # a Connect client cannot see the scheduler: a decommissioned executor ends as a lost one
