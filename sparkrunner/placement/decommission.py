"""Spark's graceful executor decommissioning (a spot node about to be reclaimed, a worker being drained), as
seen from the driver, so that a run stops its ranks gracefully (a checkpoint within ``stop_grace_s``) and, with
``max_failures``, goes on from it on the executors that stay.

Spark tells only the executor JVM (SIGPWR, with ``spark.decommission.enabled``) and the driver's scheduler;
the tasks' Python workers learn nothing. The driver's scheduler state is read through py4j
(``TaskSchedulerImpl.executorsPendingDecommission`` and ``taskIdToExecutorId``, public in the JVM though not a
documented API, the same in Spark 3.5 and 4.x); if Spark ever changes them, the check turns itself off and a
decommissioned executor ends the attempt as a lost one does.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from sparkrunner.timeouts import DECOMMISSION_CHECK_S

log = logging.getLogger(__name__)

_TASK_ON_EXECUTOR = re.compile(r"(\d+) -> ([^,()\s]+)")  # a Scala map's text: "HashMap(17 -> 1, 18 -> 0)"


class DecommissionWatch:
    """Tells, at most once a second, whether Spark is decommissioning an executor that runs one of our tasks."""

    def __init__(self, sc: Any) -> None:
        self._sc = sc
        self._next_check = 0.0
        self._off = False

    def check(self, spark_task_ids: dict[int, int]) -> str | None:
        """`spark_task_ids`: barrier task index -> Spark task id. A description of the decommissioned
        executors that run our tasks, or None."""
        now = time.monotonic()
        if self._off or not spark_task_ids or now < self._next_check:
            return None
        self._next_check = now + DECOMMISSION_CHECK_S
        try:
            return self._read(spark_task_ids)
        except Exception as exc:  # py4j: the scheduler's internals are not what this Spark version has
            log.warning(
                "cannot read Spark's executor decommission state (the check is off for this run): %s", exc
            )
            self._off = True
            return None

    def _read(self, spark_task_ids: dict[int, int]) -> str | None:
        scheduler = self._sc._jsc.sc().taskScheduler()
        pending = scheduler.executorsPendingDecommission()
        if pending.isEmpty():
            return None
        executor_of = {
            int(tid): e for tid, e in _TASK_ON_EXECUTOR.findall(scheduler.taskIdToExecutorId().toString())
        }
        hit = sorted(
            (task, executor_of[tid])
            for task, tid in spark_task_ids.items()
            if tid in executor_of and pending.contains(executor_of[tid])
        )
        if not hit:
            return None
        where = ", ".join(f"executor {executor} (barrier task {task})" for task, executor in hit)
        return f"Spark is decommissioning {where}"
