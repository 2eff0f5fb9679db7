"""Driver side of the barrier tasks' reports (`TaskReport`): how a task ended, in words.

The task side is `sparkrunner.tasks.task_report`.
"""

from __future__ import annotations

import contextlib
import signal

from sparkrunner.channel.messages import TaskReport
from sparkrunner.stack_report import ERROR_TAIL_LINES

MPIRUN_LOST_A_DAEMON = 255
"""mpirun's exit code when it lost a daemon on another host (the rsh agent returns ssh's 255 when its connection
breaks, and mpirun then ends with it): the cause is that host's barrier task, whose executor Spark names."""


def lost_a_daemon(report: TaskReport) -> bool:
    """Whether `report` is task 0's mpirun ending because a daemon on another host went away."""
    return report.launcher == "mpirun" and report.exit_code == MPIRUN_LOST_A_DAEMON


def exit_text(code: int) -> str:
    """``exit code 3``, or ``exit code -9 (killed by SIGKILL)``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"exit code {code} (killed by {signal.Signals(-code).name})"
    return f"exit code {code}"


def describe(report: TaskReport) -> str:
    """One paragraph for an error message: which task on which host, how it ended, its last output."""
    where = f"barrier task {report.task} (host {report.host})"
    if report.traceback:
        text = f"{where} failed:\n{report.traceback.rstrip()}"
    else:
        what = "mpirun" if report.launcher == "mpirun" else "the rank process"
        code = "an unknown exit code" if report.exit_code is None else exit_text(report.exit_code)
        text = f"{what} of {where} ended with {code}"
    tail = report.tail.splitlines()[-ERROR_TAIL_LINES:]
    if tail:
        text += "; its last output:\n" + "\n".join(tail)
    return text
