"""Bounded waits for state the test does not control (Spark registering executors, a process appearing).

Nothing here orders the test's own threads or processes: those synchronise on events (a line printed, an
observer hook, `Runner.wait_in_flight`). These poll an outside oracle until it holds, and fail after a limit.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.1


def poll_until(found: Callable[[], T], seconds: float) -> T:
    """The first truthy value of `found()`, polled every `POLL_S` for up to `seconds`; else its last value."""
    deadline = time.monotonic() + seconds
    while not (value := found()) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return value


def wait_until(found: Callable[[], T], seconds: float, what: str) -> T:
    """`poll_until`, failing with an AssertionError that names `what` when nothing came within `seconds`."""
    value = poll_until(found, seconds)
    if not value:
        raise AssertionError(f"{what}: not within {seconds} s")
    return value


def accepts_connections(host: str, port: int) -> bool:
    """Whether a TCP server listens on `host:port` now (a server process started by the test, not yet up)."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False
