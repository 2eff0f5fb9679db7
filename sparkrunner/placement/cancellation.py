"""How Spark tells the thread blocked in ``collect()`` that its job was cancelled, mapped to what was done.

Spark fails a cancelled job with ``[SPARK_JOB_CANCELLED] Job <id> cancelled <reason>`` (no tag before Spark 4):
the reason is ``part of cancelled job group <group>`` for ``SparkContext.cancelJobGroup``, ``part of
cancelled job tag <tag>`` for a job tag (``SparkSession.interruptTag`` on Spark Connect), ``killed via the
Web UI`` for the UI's kill link, ``because Stage <id> was cancelled`` for a stage killed there, ``as part of
cancellation of all jobs`` for ``cancelAllJobs``, and empty for ``SparkContext.cancelJob(id)``. A job ended
``because SparkContext was shut down`` was not cancelled by anyone: its executors are gone, it is a failure.
"""

from __future__ import annotations

import re

_CANCELLED = re.compile(r"Job (?P<job>\d+) cancelled(?P<reason>[^\n]*)")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")
_HOW = (
    (
        re.compile(r"part of cancelled job group (?P<what>\S+)"),
        "its job group {what} was cancelled (cancelJobGroup)",
    ),
    (
        re.compile(r"part of cancelled job tag (?P<what>\S+)"),
        "its job tag {what} was cancelled (interruptTag)",
    ),
    (re.compile(r"killed via the Web UI"), "it was killed from Spark's UI"),
    (re.compile(r"because Stage (?P<what>\d+) was cancelled"), "its stage {what} was cancelled"),
    (re.compile(r"cancellation of all jobs"), "every job of the application was cancelled (cancelAllJobs)"),
)
_NOT_CANCELLED = "SparkContext was shut down"


def spark_cancellation(error_text: str) -> str | None:
    """How a Spark job was cancelled, in words ("Spark job 3 was cancelled: its job group g was cancelled
    (cancelJobGroup)"), read from the text of the error `collect()` raised; None when it was not cancelled."""
    found = _CANCELLED.search(error_text)
    if found is None or _NOT_CANCELLED in found.group("reason"):
        return None
    reason = _SQLSTATE.sub("", found.group("reason")).strip()
    how = next(
        (text.format(**match.groupdict()) for pattern, text in _HOW if (match := pattern.search(reason))),
        f"it was cancelled by its id (cancelJob{': ' + reason if reason else ''})",
    )
    return f"Spark job {found.group('job')} was cancelled: {how}"
