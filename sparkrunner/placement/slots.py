"""How many task slots a Spark cluster has now, how many it can ever have, and waiting for enough of them.

Executors register over time (right after the SparkSession starts, or while a cluster scales up), so a run
waits for its slots up to `start_timeout`. It refuses at once only when the cluster's configuration caps the
slots below np: a `local[k]` / `local-cluster[n,c,m]` master, `spark.cores.max`, or a fixed executor count.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from sparkrunner.errors import NotEnoughSlotsError
from sparkrunner.placement.spark_sessions import context_conf, is_connect_session
from sparkrunner.timeouts import SLOTS_POLL_S

log = logging.getLogger(__name__)


def task_slots(sc: Any) -> int:
    """How many tasks the cluster can run at once with the default resource profile."""
    jsc = sc._jsc.sc()
    try:
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception:
        return int(sc.defaultParallelism)


def session_slots(spark: Any) -> int | None:
    """Task slots of a classic or Spark Connect session; None when Connect's master name does not say (no
    SparkContext to ask over Connect)."""
    if not is_connect_session(spark):
        return task_slots(spark.sparkContext)
    cores = local_cores(str(spark.conf.get("spark.master", None) or ""))
    return None if cores is None else cores // int(spark.conf.get("spark.task.cpus", "1") or 1)


def local_cores(master: str) -> int | None:
    """Cores of a local master (`local`, `local[k]`, `local[*]`, `local-cluster[n,c,m]`); None otherwise."""
    if master == "local":
        return 1
    if match := re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master):
        return os.cpu_count() or 1 if match.group(1) == "*" else int(match.group(1))
    if match := re.fullmatch(r"local-cluster\[(\d+),\s*(\d+),\s*\d+\]", master):
        return int(match.group(1)) * int(match.group(2))
    return None


def slot_ceiling(conf: Any, master: str) -> tuple[int, str] | None:
    """The most task slots this cluster can ever have and why, or None when it may grow without a known limit."""
    task_cpus = int(conf.get("spark.task.cpus", "1"))
    cores = local_cores(master)
    if cores is not None:
        return cores // task_cpus, f"the master is {master}"
    if conf.get("spark.cores.max", None):
        return int(conf.get("spark.cores.max")) // task_cpus, f"spark.cores.max={conf.get('spark.cores.max')}"
    instances, executor_cores = (
        conf.get("spark.executor.instances", None),
        conf.get("spark.executor.cores", None),
    )
    if instances and executor_cores:
        ceiling = int(instances) * int(executor_cores) // task_cpus
        return ceiling, f"spark.executor.instances={instances} x spark.executor.cores={executor_cores}"
    return None


def too_few_slots(num_ranks: int, slots: int, why: str) -> NotEnoughSlotsError:
    """The one "not enough slots" error: what np needs, what the cluster has and why, and what to do."""
    return NotEnoughSlotsError(
        f"np={num_ranks} needs {num_ranks} task slots at once, but this Spark cluster has {slots}{why and f' ({why})'}. "
        f"A barrier stage would wait forever; ask for np <= {slots}, or add executors or cores "
        f"(spark.task.cpus also counts)."
    )


def wait_for_slots(sc: Any, num_ranks: int, timeout_s: float) -> None:
    """Return once the cluster has `num_ranks` free-or-busy slots; refuse at once when it never can, or
    after `timeout_s` of waiting for executors that do not come."""
    ceiling = slot_ceiling(context_conf(sc), sc.master)
    if ceiling is not None and ceiling[0] < num_ranks:
        raise too_few_slots(num_ranks, ceiling[0], f"at most: {ceiling[1]}")
    deadline = time.monotonic() + timeout_s
    slots, shown = task_slots(sc), None
    while slots < num_ranks:
        if time.monotonic() > deadline:
            raise too_few_slots(
                num_ranks, slots, f"after waiting start_timeout={timeout_s:g} s for more executors"
            )
        if slots != shown:
            log.info("waiting for %d task slots (%d available)...", num_ranks, slots)
            shown = slots
        time.sleep(SLOTS_POLL_S)
        slots = task_slots(sc)
