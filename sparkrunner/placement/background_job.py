"""A Spark job on a thread of its own: `collect()` blocks until the barrier stage ends, the run does not."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

from sparkrunner.placement.cancellation import spark_cancellation
from sparkrunner.timeouts import BACKGROUND_CANCEL_REPEAT_S, BACKGROUND_STOP_JOIN_S

_PYTHON_EXCEPTION_LINE = re.compile(
    r"(?!org\.apache\.|java\.|scala\.|py4j\.)[A-Za-z_][\w.]*(Error|Exception): "
)
_SPARK_EXCEPTION_PREFIX = re.compile(
    r"^[:\s]*(?:(?:org\.apache|java|scala)\.[\w.$]+(?:Exception|Error):\s*)?"
)
_EXECUTOR_LOST = re.compile(
    r"ExecutorLostFailure \(executor (?P<executor>\S+)[^)]*\)(?: Reason: [^\n]*?code (?P<code>-?\d+))?"
)

Records = list[dict[str, object]]


class BackgroundJob:
    """Runs `collect` (the barrier stage, returning one record per task) on a named thread; `cancel` ends it
    early (a job group or a job tag, whichever the session has)."""

    def __init__(self, name: str, collect: Callable[[], Records], cancel: Callable[[], None]) -> None:
        self._collect = collect
        self._cancel = cancel
        self._records: Records = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._records = self._collect()
        except BaseException as exc:
            self._error = exc

    def failure(self) -> str | None:
        """Why the stage's ranks ended abnormally (see `describe_failure`), or None."""
        return describe_failure(self._error, self._records)

    def cancelled(self) -> str | None:
        """How the job was cancelled from outside (see `spark_cancellation`), or None."""
        return None if self._error is None else spark_cancellation(str(self._error))

    def finished(self) -> bool:
        return not self._thread.is_alive()

    def stop(self) -> None:
        """Cancel the job while its thread runs, and wait (bounded) for the thread to end. The cancel is repeated:
        one that comes before the thread has submitted the job to Spark cancels nothing."""
        until = time.monotonic() + BACKGROUND_STOP_JOIN_S
        while self._thread.is_alive() and time.monotonic() < until:
            self._cancel()
            self._thread.join(BACKGROUND_CANCEL_REPEAT_S)


def describe_failure(job_error: BaseException | None, records: list[dict[str, object]]) -> str | None:
    """Why a barrier stage's ranks ended abnormally: the job's error, or the first task's non-zero exit."""
    if job_error is not None:
        return f"the Spark barrier stage failed: {short_spark_error(job_error)}"
    for record in records:
        if record["exit_code"] != 0:
            return (
                f"barrier task {record['index']} ended with exit code {record['exit_code']}; "
                f"its last output:\n{record['tail']}"
            )
    return None


def short_spark_error(exc: BaseException) -> str:
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
    reason = _spark_reason(lines)
    lost = _EXECUTOR_LOST.search(reason)
    if lost is not None:
        return f"{_lost_executor_advice(lost)} (Spark: {reason})"[:2000]
    return reason[:2000]


def _spark_reason(lines: list[str]) -> str:
    """Spark's own message, on one line: the exception's line and the reason lines after it, without py4j's
    "An error occurred while calling ..." header, the exception's class name or the JVM stack."""
    start = next((i for i, line in enumerate(lines) if "Exception" in line or "Error" in line), None)
    if start is None:
        return " ".join(lines).strip()
    kept = [_SPARK_EXCEPTION_PREFIX.sub("", lines[start]).strip()]
    for line in lines[start + 1 :]:
        if line.startswith(("\tat ", "Driver stacktrace")) or not line.strip():
            break
        kept.append(line.strip())
    return " ".join(kept)


def _lost_executor_advice(lost: re.Match[str]) -> str:
    """What a lost executor means, in the words of the person who has to do something about it."""
    code = lost.group("code")
    why = f"Spark executor {lost.group('executor')}, which ran a barrier task of this run, was lost"
    if code == "137":
        return (
            f"{why}: its JVM was killed with SIGKILL (exit code 137): the OS's out-of-memory killer, a "
            "preempted or decommissioned node, or a kill by hand. Check the executor's memory "
            "(spark.executor.memory, spark.executor.memoryOverhead) and its host's log"
        )
    return why + (f" (exit code {code})" if code else "")


class StageHolder:
    """What a placement that runs its barrier stage as one `BackgroundJob` answers from that job."""

    _job: BackgroundJob | None = None

    def cancelled(self) -> str | None:
        return None if self._job is None else self._job.cancelled()

    def finished(self) -> bool:
        return self._job is not None and self._job.finished()

    def stop(self) -> None:
        if self._job is not None:
            self._job.stop()
