"""Which Spark executor this barrier task runs in, asked of the task's own process tree (no REST call).

Python workers are not told their executor's id, but every executor backend (standalone, local-cluster,
YARN, Kubernetes) is started with ``--executor-id <id>`` on its command line, and a task's Python worker
descends from it. A task of ``local[N]`` descends from the driver's JVM (``SparkSubmit``), whose executor
is Spark's ``driver``.
"""

from __future__ import annotations

import functools
import os

from sparkrunner.common.environment import Env
from sparkrunner.system.processes import proc_stat, proc_strings

_EXECUTOR_FLAG = b"--executor-id"
_DRIVER_JVM = b"org.apache.spark.deploy.SparkSubmit"


@functools.cache
def executor_id() -> str | None:
    """The id of the executor running this process (``"driver"`` in local mode), or None when no ancestor
    tells it."""
    pid = os.getpid()
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        argv = proc_strings(pid, "cmdline")
        if _EXECUTOR_FLAG in argv[:-1]:
            return argv[argv.index(_EXECUTOR_FLAG) + 1].decode(errors="replace")
        if _DRIVER_JVM in argv:
            return "driver"
        stat = proc_stat(pid)
        pid = stat.ppid if stat is not None else 0
    return None


def task_environment(task: int) -> dict[str, str]:
    """The variables naming where a rank started by barrier task `task` runs: the task and its executor."""
    env = {Env.STARTED_BY_TASK: str(task)}
    executor = executor_id()
    if executor is not None:
        env[Env.EXECUTOR] = executor
    return env
