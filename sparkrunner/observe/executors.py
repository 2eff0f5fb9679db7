"""Which Spark executor ran a barrier task: asked of Spark's status tracker and REST API, on the driver.

A rank cannot tell its executor's id (Python workers are not told it), so a warning that names an executor
looks it up here, once, when it has something to say.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from typing import Any

from sparkrunner.timeouts import SPARK_REST_TIMEOUT_S


def executor_of_task(job_group: str | None, task: int) -> str | None:
    """The id of the executor that ran barrier task (partition) `task` of the job group's latest stage, or
    None when that cannot be known (no classic SparkContext here, its UI off, the job gone)."""
    from pyspark import SparkContext

    context: Any = SparkContext._active_spark_context
    if job_group is None or context is None or not context.uiWebUrl:
        return None
    tracker = context.statusTracker()
    stages = [
        stage
        for job in tracker.getJobIdsForGroup(job_group)
        if (info := tracker.getJobInfo(job)) is not None
        for stage in info.stageIds
    ]
    base = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/stages"
    for stage in sorted(stages, reverse=True):
        with contextlib.suppress(OSError, ValueError):
            url = f"{base}/{stage}/0/taskList?length=100000"
            with urllib.request.urlopen(url, timeout=SPARK_REST_TIMEOUT_S) as answer:
                tasks = json.load(answer)
            found = [t["executorId"] for t in tasks if t.get("index") == task]
            if found:
                return str(found[-1])
    return None
