"""Task side: how a barrier task ended, told to the driver at once over the driver channel (`Message.TASK_REPORT`).

Spark reports a barrier task's outcome only when the whole stage ends, and then as one line; this report
arrives the moment the task's rank process (or mpirun) exits, with its exit code, its last output and, when
the task itself failed, the Python traceback.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from sparkrunner import channel
from sparkrunner.channel.messages import Message
from sparkrunner.timeouts import TASK_REPORT_CONNECT_TIMEOUT_S

log = logging.getLogger(__name__)


def send(
    driver: tuple[str, int],
    secret: bytes,
    report: dict[str, Any],
) -> None:
    """Send `report` (see `Message.TASK_REPORT`) to the driver; a driver that is gone is not an error."""
    try:
        conn = channel.connect(driver, secret, timeout=TASK_REPORT_CONNECT_TIMEOUT_S)
    except channel.ChannelError as exc:
        log.warning("could not tell the driver how barrier task %s ended: %s", report.get("task"), exc)
        return
    with contextlib.suppress(channel.ChannelError):
        conn.send(Message.TASK_REPORT, report)
    conn.close()
