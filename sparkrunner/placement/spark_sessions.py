"""Finding the SparkSession a run uses, from any thread, and telling classic sessions from Spark Connect ones."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from sparkrunner.errors import InvalidArgumentError


def find_spark_session() -> Any:
    """The session users mean: this thread's active one, else the default (first live) session of the process.

    `SparkSession.getActiveSession()` alone is thread-local: worker threads of a hyperparameter search would
    find nothing. Classic and Spark Connect sessions are both looked for.
    """
    from pyspark.sql import SparkSession

    # a local Connect server keeps a classic session in this process too: the Connect one is the user's
    for candidate in (_active(SparkSession), _connect_default(), _classic_default(SparkSession)):
        if candidate is not None:
            return candidate
    raise InvalidArgumentError(
        "np > 0 runs the ranks in a Spark barrier stage, but this process has no SparkSession. Create one "
        "(SparkSession.builder.getOrCreate()), pass spark=..., or use np < 0 to run on the driver only."
    )


def is_connect_session(spark: Any) -> bool:
    """True for a Spark Connect session or DataFrame (pyspark.sql.connect): no SparkContext, no JVM object."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _active(session_class: Any) -> Any:
    try:
        return session_class.getActiveSession()
    except Exception:  # a stopped context, or Connect mode without its client libraries
        return None


def _classic_default(session_class: Any) -> Any:
    session = getattr(session_class, "_instantiatedSession", None)
    if session is None or getattr(getattr(session, "_sc", None), "_jsc", None) is None:
        return None  # none, or stopped
    return session


def _connect_default() -> Any:
    connect = sys.modules.get("pyspark.sql.connect.session")  # only when a Connect session was ever made
    if connect is None:
        return None
    getter = getattr(connect.SparkSession, "_get_default_session", None)
    return getter() if getter is not None else getattr(connect.SparkSession, "_default_session", None)


@contextlib.contextmanager
def jobs_tagged(spark: Any, tag: str) -> Iterator[None]:
    """The Spark jobs this thread starts inside carry `tag`, so that `cancel_tagged` ends them from any thread.

    A classic session's own tags (``SparkSession.addTag``) cannot be interrupted from another thread, so classic
    sessions tag through their SparkContext; Spark Connect has only the session's tags."""
    if is_connect_session(spark):
        spark.addTag(tag)
    else:
        spark.sparkContext.addJobTag(tag)
    try:
        yield
    finally:
        if is_connect_session(spark):
            spark.removeTag(tag)
        else:
            spark.sparkContext.removeJobTag(tag)


def cancel_tagged(spark: Any, tag: str) -> None:
    """Cancel the running jobs started inside ``jobs_tagged(spark, tag)``."""
    if is_connect_session(spark):
        spark.interruptTag(tag)
    else:
        spark.sparkContext.cancelJobsWithTag(tag)


def conf_value(spark: Any, key: str, default: str) -> str:
    """A Spark setting: the SparkContext's configuration on classic Spark, the session's on Spark Connect."""
    if spark is None:
        return default
    if is_connect_session(spark):
        return str(spark.conf.get(key, default))
    return str(context_conf(spark.sparkContext).get(key, default))


def context_conf(sc: Any) -> Any:
    """A SparkContext's own configuration (a `SparkConf` over the JVM's), to read in place: `getConf()` copies
    every entry over py4j, one call each (15-30 ms on local-cluster, and a run read it six times)."""
    return sc._conf


def task_resource_amount(spark: Any, resource: str = "gpu") -> float:
    """How much of `resource` Spark gives each task (``spark.task.resource.<resource>.amount``; 0 when unset),
    on classic Spark and Spark Connect alike: the one place sparkrunner reads a task's GPU share."""
    return float(conf_value(spark, f"spark.task.resource.{resource}.amount", "0") or 0)


def executors_print_to_this_console(spark: Any) -> bool:
    """Whether the executors' stdout/stderr is this process's console: a local master (``local``, ``local[k]``)
    run by this process, classic or through the Spark Connect server pyspark starts in it (``remote("local")``)."""
    master = conf_value(spark, "spark.master", "")
    local = master == "local" or master.startswith("local[")
    return local and (not is_connect_session(spark) or "SPARK_LOCAL_REMOTE" in os.environ)
