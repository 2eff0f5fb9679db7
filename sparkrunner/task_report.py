"""How a barrier task ended, told to the driver at once over the driver channel (`Message.TASK_REPORT`).

Spark reports a barrier task's outcome only when the whole stage ends, and then as one line; this report
arrives the moment the task's rank process (or mpirun) exits, with its exit code, its last output and, when
the task itself failed, the Python traceback.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from typing import Any

from sparkrunner import channel
from sparkrunner.output import ERROR_TAIL_LINES
from sparkrunner.protocol import Message

log = logging.getLogger("sparkrunner")
_CONNECT_TIMEOUT_S = 5.0


def send(
    driver: tuple[str, int],
    secret: bytes,
    report: dict[str, Any],
) -> None:
    """Send `report` (see `Message.TASK_REPORT`) to the driver; a driver that is gone is not an error."""
    try:
        conn = channel.connect(driver, secret, timeout=_CONNECT_TIMEOUT_S)
    except channel.ChannelError as exc:
        log.warning("could not tell the driver how barrier task %s ended: %s", report.get("task"), exc)
        return
    with contextlib.suppress(channel.ChannelError):
        conn.send(Message.TASK_REPORT, report)
    conn.close()


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
