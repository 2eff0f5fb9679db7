"""The rank's output relay: fds 1 and 2 go into pipes read by a forked process that forwards to the driver.

A separate process, not a thread, so that what a rank printed last still reaches the driver when the rank
dies hard (``os._exit``, SIGKILL, a segfault) or holds the GIL in C code, and so that forwarding a storm of
output does not compete with the training loop for the GIL.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time

from sparkrunner import channel, output
from sparkrunner.protocol import Message

_STREAMS = ((1, "stdout"), (2, "stderr"))
_STOP_WAIT_S = 2.0


class OutputRelay:
    """Start it before anything else (no threads, no sockets yet): the relay is forked from this process."""

    def __init__(self, driver: tuple[str, int], secret: bytes, rank: int, echo: bool) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pipes = {fd: os.pipe() for fd, _ in _STREAMS}
        self._saved = {fd: os.dup(fd) for fd, _ in _STREAMS}
        self._pid = os.fork()
        if self._pid == 0:  # the relay
            for _, write_end in pipes.values():
                os.close(write_end)
            echo_fds = self._saved if echo else {}
            os._exit(_relay(driver, secret, rank, {fd: r for fd, (r, _) in pipes.items()}, echo_fds))
        for fd, (read_end, write_end) in pipes.items():
            os.close(read_end)
            os.dup2(write_end, fd)
            os.close(write_end)
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True)

    def stop(self) -> None:
        """Restore fds 1 and 2 and wait (bounded) until the relay has sent every captured line."""
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)
        # a child that inherited the pipes keeps the relay going; do not wait for it forever
        deadline = time.monotonic() + _STOP_WAIT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(self._pid, os.WNOHANG)[0] == 0:
                    time.sleep(0.01)
                    continue
            return


def _relay(
    driver: tuple[str, int], secret: bytes, rank: int, read_fds: dict[int, int], echo_fds: dict[int, int]
) -> int:
    """Body of the relay process: forward both streams until every writer has closed them."""
    conn: channel.Connection | None
    try:
        conn = channel.connect(driver, secret)
        conn.send(Message.OUTPUT_STREAM, {"rank": rank})
    except channel.ChannelError:
        conn = None  # the driver is out of reach: still echo what the rank prints (its task's tail keeps it)

    def send(kind: str, data: object) -> None:
        if conn is not None:
            with contextlib.suppress(channel.ChannelError):
                conn.send(kind, data)

    threads = []
    for fd, name in _STREAMS:
        args = (
            read_fds[fd],
            lambda lines, name=name: send(Message.OUTPUT, (name, lines)),
            lambda update, name=name: send(Message.OUTPUT_UPDATE, (name, update)),
            echo_fds.get(fd),
        )
        threads.append(threading.Thread(target=output.pump, args=args, daemon=True))
        threads[-1].start()
    for thread in threads:
        thread.join()
    if conn is not None:
        conn.close()
    return 0
