"""A warm rank's output relay: forked once (before the user's imports make a fork cost tens of ms), it
forwards fds 1 and 2 to each run's driver channel in turn, over a connection of that run, as a cold rank's
`OutputRelay` does for its only run.

At a run's start the rank tells the relay where the run's channel is (a control pipe); at its end the rank
writes `END_OF_RUN` on both streams and waits until the relay has forwarded everything before it and hung
up: the run's driver then holds the run's whole output, as after a cold rank's relay ended.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import sys
import threading

from sparkrunner import channel
from sparkrunner.channel import messages as m
from sparkrunner.ranks.output_relay import pump, write_into
from sparkrunner.timeouts import RELAY_STOP_WAIT_S

END_OF_RUN = "\x00sparkrunner-end-of-run\x00"
_STREAMS = ((1, "stdout"), (2, "stderr"))


class WarmRelay:
    """Create it before anything else of the user's runs: the relay is forked from this process."""

    def __init__(self, rank: int, echo: bool) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pipes = {fd: os.pipe() for fd, _ in _STREAMS}
        control_read, self._control = os.pipe()
        self._acks, ack_write = os.pipe()
        saved = {fd: os.dup(fd) for fd, _ in _STREAMS}
        if os.fork() == 0:  # the relay
            for fd in (self._control, self._acks, *(write_end for _, write_end in pipes.values())):
                os.close(fd)
            reads = {fd: read_end for fd, (read_end, _) in pipes.items()}
            os._exit(_relay(rank, reads, control_read, ack_write, saved if echo else {}))
        for fd in (control_read, ack_write, *saved.values()):
            os.close(fd)
        write_into(pipes)

    def open_run(self, driver: tuple[str, int], secret: bytes) -> WarmRelay:
        """Forward from now on to the run whose channel is at `driver`; `stop()` ends that run's share."""
        body = pickle.dumps((driver, secret))
        os.write(self._control, len(body).to_bytes(4, "big") + body)
        self._wait_for_relay()  # connected: nothing the run prints is lost
        return self

    def _wait_for_relay(self) -> None:
        if select.select([self._acks], [], [], RELAY_STOP_WAIT_S)[0]:
            os.read(self._acks, 1)

    def stop(self) -> None:
        """Mark the end of the run's output and wait (bounded) until the relay has sent all of it."""
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        marker = (END_OF_RUN + "\n").encode()
        for fd, _ in _STREAMS:
            os.write(fd, marker)
        self._wait_for_relay()


class _RunLink:
    """The relay's connection to the run in flight; both streams' end markers close it and ack the rank."""

    def __init__(self, rank: int, ack_fd: int, echo_fds: dict[int, int]) -> None:
        self._rank = rank
        self._ack_fd = ack_fd
        self._echo = {name: echo_fds[fd] for fd, name in _STREAMS if fd in echo_fds}
        self._lock = threading.Lock()
        self._conn: channel.Connection | None = None
        self._ended: set[str] = set()

    def open(self, driver: tuple[str, int], secret: bytes) -> None:
        """Connect to the run's channel, then tell the rank (which waits for it)."""
        try:
            conn = channel.connect(driver, secret)
            m.send(conn, m.OutputStream(self._rank))
            with self._lock:
                self._conn = conn
        except channel.ChannelError:
            pass  # the driver is out of reach: the run's output is lost, as for a cold relay
        os.write(self._ack_fd, b"o")

    def send(self, message: m.Message) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(channel.ChannelError):
                    m.send(self._conn, message)

    def update(self, stream: str, text: str) -> None:
        self._echo_text(stream, text + "\r")
        self.send(m.OutputUpdate(stream, text))

    def _echo_text(self, stream: str, text: str) -> None:
        """A copy for the rank's own stdout/stderr (its executor's log), without the end markers."""
        if stream in self._echo:
            with contextlib.suppress(OSError):
                os.write(self._echo[stream], text.encode(errors="replace"))

    def lines(self, stream: str, lines: list[str]) -> None:
        """Forward `lines`, acting on an end marker among them (what the run printed last precedes it)."""
        echoed = (line.removesuffix(END_OF_RUN) + "\n" for line in lines if line != END_OF_RUN)
        self._echo_text(stream, "".join(echoed))
        kept: list[str] = []
        for line in lines:
            if not line.endswith(END_OF_RUN):
                kept.append(line)
                continue
            if line[: -len(END_OF_RUN)]:
                kept.append(line[: -len(END_OF_RUN)])  # a last line without its newline
            if kept:
                self.send(m.Output(stream, kept))
            kept = []
            self._end(stream)
        if kept:
            self.send(m.Output(stream, kept))

    def _end(self, stream: str) -> None:
        with self._lock:
            self._ended.add(stream)
            if len(self._ended) < len(_STREAMS):
                return
            self._ended.clear()
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        os.write(self._ack_fd, b"x")


def _relay(rank: int, reads: dict[int, int], control: int, ack_fd: int, echo_fds: dict[int, int]) -> int:
    """Body of the relay process: pump both streams; open a run's link each time the rank says so."""
    link = _RunLink(rank, ack_fd, echo_fds)
    pumps = [
        threading.Thread(
            target=pump,
            args=(
                reads[fd],
                lambda lines, name=name: link.lines(name, lines),
                lambda update, name=name: link.update(name, update),
            ),
            daemon=True,
        )
        for fd, name in _STREAMS
    ]
    for thread in pumps:
        thread.start()
    with os.fdopen(control, "rb") as runs:
        while header := runs.read(4):
            driver, secret = pickle.loads(runs.read(int.from_bytes(header, "big")))
            link.open(driver, secret)
    for thread in pumps:  # the rank is gone: forward what it printed last (a child may hold the pipes)
        thread.join(RELAY_STOP_WAIT_S)
    return 0
