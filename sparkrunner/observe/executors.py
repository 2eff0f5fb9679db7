"""Which Spark executor ran a barrier task: asked of Spark's REST API, on the driver.

A rank cannot tell its executor's id (Python workers are not told it), so a warning that names an executor
looks it up here, once, when it has something to say.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from sparkrunner.timeouts import SPARK_REST_TIMEOUT_S


def executor_of_task(job_group: str | None, task: int) -> str | None:
    """The id of the executor that ran barrier task (partition) `task` in the job group's latest stage, or
    None when that cannot be known (no classic SparkContext here, its UI off, the job gone)."""
    from pyspark import SparkContext

    context: Any = SparkContext._active_spark_context
    if job_group is None or context is None or not context.uiWebUrl:
        return None
    base = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}"
    jobs = _ask(f"{base}/jobs")
    stages = [stage for job in jobs if job.get("jobGroup") == job_group for stage in job.get("stageIds", [])]
    for stage in sorted(stages, reverse=True):
        found = [
            t["executorId"]
            for t in _ask(f"{base}/stages/{stage}/0/taskList?length=100000")
            if t.get("index") == task
        ]
        if found:
            return str(found[-1])
    return None


def _ask(url: str) -> list[dict[str, Any]]:
    """A list Spark's REST API answers (empty when it cannot)."""
    try:
        with urllib.request.urlopen(url, timeout=SPARK_REST_TIMEOUT_S) as answer:
            found = json.load(answer)
    except (OSError, ValueError):
        return []
    return found if isinstance(found, list) else []
