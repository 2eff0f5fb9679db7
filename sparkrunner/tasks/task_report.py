"""Task side: how a barrier task ended, told to the driver at once over the driver channel (`TaskReport`).

Spark reports a barrier task's outcome only when the whole stage ends, and then as one line; this report
arrives the moment the task's rank process (or mpirun) exits, with its exit code, its last output and, when
the task itself failed, the Python traceback.
"""

from __future__ import annotations

import contextlib
import logging

from sparkrunner import channel
from sparkrunner.channel.messages import TaskReport
from sparkrunner.channel.messages import send as send_message
from sparkrunner.timeouts import TASK_REPORT_CONNECT_TIMEOUT_S

log = logging.getLogger(__name__)


def send(
    driver: tuple[str, int],
    secret: bytes,
    report: TaskReport,
) -> None:
    """Send `report` to the driver; a driver that is gone is not an error."""
    try:
        conn = channel.connect(driver, secret, timeout=TASK_REPORT_CONNECT_TIMEOUT_S)
    except channel.ChannelError as exc:
        log.warning("could not tell the driver how barrier task %s ended: %s", report.task, exc)
        return
    with contextlib.suppress(channel.ChannelError):
        send_message(conn, report)
    conn.close()
