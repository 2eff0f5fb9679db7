"""The rank's output relay: fds 1 and 2 go into pipes read by a forked process that forwards to the driver.

A separate process, not a thread, so that what a rank printed last still reaches the driver when the rank
dies hard (``os._exit``, SIGKILL, a segfault) or holds the GIL in C code, and so that forwarding a storm of
output does not compete with the training loop for the GIL. `pump` reads a captured fd in linear time, batches
finished lines into one message per read and forwards `\\r` progress updates (tqdm) at most every
`RELAY_UPDATE_INTERVAL_S`.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

from sparkrunner import channel
from sparkrunner.channel import messages as m
from sparkrunner.channel.lines import LineSplitter
from sparkrunner.timeouts import RELAY_STOP_POLL_S, RELAY_STOP_WAIT_S, RELAY_UPDATE_INTERVAL_S

_STREAMS = ((1, "stdout"), (2, "stderr"))
_READ_BYTES = 65536


class OutputRelay:
    """Start it before anything else (no threads, no sockets yet): the relay is forked from this process."""

    def __init__(self, driver: tuple[str, int], secret: bytes, rank: int, echo: bool) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pipes = {fd: os.pipe() for fd, _ in _STREAMS}
        done_read, self._done = os.pipe()
        self._saved = {fd: os.dup(fd) for fd, _ in _STREAMS}
        self._pid = os.fork()
        if self._pid == 0:  # the relay
            for write_end in (self._done, *(write_end for _, write_end in pipes.values())):
                os.close(write_end)
            echo_fds = self._saved if echo else {}
            reads = {fd: read_end for fd, (read_end, _) in pipes.items()}
            os._exit(_relay(driver, secret, rank, reads, echo_fds, done_read))
        os.close(done_read)
        write_into(pipes)

    def stop(self) -> None:
        """Restore fds 1 and 2 and wait (bounded) until the relay has sent every captured line."""
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)
        # a child that inherited the pipes (a daemon the function left) would keep them open, so no end of file
        # would come: say the rank is done (what it printed is in the pipes now), and the relay forwards what
        # the pipes hold and ends. One that still does not end (a child writing on and on) is killed, or it
        # holds the launcher's output pipe (mpirun waits on it)
        with contextlib.suppress(OSError):
            os.write(self._done, b"x")  # the relay may be gone already (killed with the rank's group)
        os.close(self._done)
        deadline = time.monotonic() + RELAY_STOP_WAIT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(self._pid, os.WNOHANG)[0] == 0:
                    time.sleep(RELAY_STOP_POLL_S)
                    continue
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)


def write_into(pipes: dict[int, tuple[int, int]]) -> None:
    """In the rank, after the fork: fds 1 and 2 write into the relay's pipes, Python's streams line-buffered."""
    for fd, (read_end, write_end) in pipes.items():
        os.close(read_end)
        os.dup2(write_end, fd)
        os.close(write_end)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)


def _relay(
    driver: tuple[str, int],
    secret: bytes,
    rank: int,
    read_fds: dict[int, int],
    echo_fds: dict[int, int],
    done_fd: int,
) -> int:
    """Body of the relay process: forward both streams until every writer has closed them, or the rank says
    it is done (`done_fd` readable) and they hold nothing more."""
    conn: channel.Connection | None
    try:
        conn = channel.connect(driver, secret)
        m.send(conn, m.OutputStream(rank))
    except channel.ChannelError:
        conn = None  # the driver is out of reach: still echo what the rank prints (its task's tail keeps it)

    def send(message: m.Message) -> None:
        if conn is not None:
            with contextlib.suppress(channel.ChannelError):
                m.send(conn, message)

    threads = []
    for fd, name in _STREAMS:
        args = (
            read_fds[fd],
            lambda lines, name=name: send(m.Output(name, lines)),
            lambda update, name=name: send(m.OutputUpdate(name, update)),
            echo_fds.get(fd),
            done_fd,
        )
        threads.append(threading.Thread(target=pump, args=args, daemon=True))
        threads[-1].start()
    for thread in threads:
        thread.join()
    if conn is not None:
        conn.close()
    return 0


SendLines = Callable[[list[str]], None]
SendUpdate = Callable[[str], None]


def pump(
    read_fd: int,
    send_lines: SendLines,
    send_update: SendUpdate,
    echo_fd: int | None = None,
    done_fd: int | None = None,
) -> None:
    """Forward everything written to `read_fd` until EOF, or, once `done_fd` is readable, until `read_fd`
    holds nothing more: lines batched per read, updates rate-limited."""
    splitter = LineSplitter()
    update: str | None = None
    sent_at = 0.0
    watched = [read_fd] if done_fd is None else [read_fd, done_fd]
    draining = False
    while True:
        if update is not None and time.monotonic() - sent_at >= RELAY_UPDATE_INTERVAL_S:
            send_update(update)
            update, sent_at = None, time.monotonic()
        wait = None if update is None else max(0.0, sent_at + RELAY_UPDATE_INTERVAL_S - time.monotonic())
        ready = select.select(watched, [], [], 0.0 if draining else wait)[0]
        if done_fd in ready:
            draining, watched = True, [read_fd]
            continue
        if not ready:
            if draining:
                break
            continue
        chunk = os.read(read_fd, _READ_BYTES)
        if not chunk:
            break
        if echo_fd is not None:
            with contextlib.suppress(OSError):
                os.write(echo_fd, chunk)
        lines, latest = splitter.feed(chunk)
        if lines:
            send_lines(lines)
            update = None
        if latest is not None:
            update = latest
    last = splitter.flush()
    if last is not None:
        send_lines([last])
    elif update is not None:
        send_update(update)
