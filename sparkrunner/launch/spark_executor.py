"""Which Spark executor this barrier task runs in, asked of the task's own process tree (no REST call).

Python workers are not told their executor's id, but every executor backend (standalone, local-cluster,
YARN, Kubernetes) is started with ``--executor-id <id>`` on its command line, and a task's Python worker
descends from it. A task of ``local[N]`` descends from the driver's JVM (``SparkSubmit``), whose executor
is Spark's ``driver``.
"""

from __future__ import annotations

import functools
import os

from sparkrunner.channel.environment import Env

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
        argv = _cmdline(pid)
        if _EXECUTOR_FLAG in argv[:-1]:
            return argv[argv.index(_EXECUTOR_FLAG) + 1].decode(errors="replace")
        if _DRIVER_JVM in argv:
            return "driver"
        pid = _parent(pid)
    return None


def task_environment(task: int) -> dict[str, str]:
    """The variables naming where a rank started by barrier task `task` runs: the task and its executor."""
    env = {Env.STARTED_BY_TASK: str(task)}
    executor = executor_id()
    if executor is not None:
        env[Env.EXECUTOR] = executor
    return env


def _cmdline(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _parent(pid: int) -> int:
    """The parent's pid (0 when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    return int(stat[stat.rindex(b")") + 2 :].split()[1])  # the name (field 2) may hold spaces and ")"
