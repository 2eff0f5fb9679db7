"""Driver side of the barrier tasks' reports (`Message.TASK_REPORT`): how a task ended, in words.

The task side is `sparkrunner.tasks.task_report`.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any

from sparkrunner.driver.output import ERROR_TAIL_LINES


def exit_text(code: int) -> str:
    """``exit code 3``, or ``exit code -9 (killed by SIGKILL)``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"exit code {code} (killed by {signal.Signals(-code).name})"
    return f"exit code {code}"


def describe(report: dict[str, Any]) -> str:
    """One paragraph for an error message: which task on which host, how it ended, its last output."""
    where = f"barrier task {report['task']} (host {report['host']})"
    if report.get("traceback"):
        text = f"{where} failed:\n{str(report['traceback']).rstrip()}"
    else:
        what = "mpirun" if report.get("launcher") == "mpirun" else "the rank process"
        text = f"{what} of {where} ended with {exit_text(int(report['exit_code']))}"
    tail = str(report.get("tail") or "").splitlines()[-ERROR_TAIL_LINES:]
    if tail:
        text += "; its last output:\n" + "\n".join(tail)
    return text
