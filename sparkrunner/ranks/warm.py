"""A warm session's rank: one process serves run after run, so its imports (and CUDA context) are paid once.

The rank keeps a connection to its session's home on the driver and waits there for `Serve`. It then runs
that run exactly as a cold rank does (its own connection to the run's driver channel, its output relay, its
result), with the run's environment variables set, and comes back for the next. A rank whose run failed or
was asked to stop is dirty: it ends, and the driver replaces every rank of the session on the next run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from sparkrunner import channel
from sparkrunner.channel import messages as m
from sparkrunner.ranks import graceful_stop, progress

RunOnce = Callable[[tuple[str, int], bytes], int]
"""One run against the driver channel at an address, with its secret; the rank's exit code for it."""


def serve(
    home: tuple[str, int], secret: bytes, hello: m.Hello, run_once: RunOnce, die: Callable[[int], None]
) -> int:
    """Say `hello` to the session's home, then run every `Serve` it sends until it aborts or closes."""
    conn = channel.connect(home, secret)
    m.send(conn, hello)
    while True:
        try:
            message = m.receive(conn)
        except channel.ChannelError:
            return 0  # the session closed: nothing of a run is in flight
        if not isinstance(message, m.Serve):
            die(0)  # Abort: the session is over
            return 0
        code = _one_run(message, run_once)
        if code != 0:
            return code  # dirty: never reused


def _one_run(serving: m.Serve, run_once: RunOnce) -> int:
    """Run one run with its environment; afterwards the process holds nothing of it."""
    saved = {name: os.environ.get(name) for name in serving.env}
    os.environ.update(serving.env)
    host, port = serving.driver.rsplit(":", 1)
    try:
        code = run_once((host, int(port)), serving.secret)
    finally:
        _restore(saved)
    _leave_process_group()
    progress.forget_steps()
    stopped = graceful_stop.reset()
    return code or (143 if stopped else 0)


def _restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _leave_process_group() -> None:
    """A run that left torch.distributed initialized: destroy its process group so the next run can init."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
