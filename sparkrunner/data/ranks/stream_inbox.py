"""A rank's stream server: feeder tasks push its share's Arrow batches straight to it, never through the driver.

One authenticated, encrypted server per stream in each rank process serves every pass the process reads (a
pass is known by the token the rank sent the driver with its address). A share arrives from several feeders
at once and is delivered in the share's order. Bounded memory: a feeder sends at most `stream_feeder.WINDOW`
batches ahead of their acks, and a batch's ack waits while the rank holds more than `buffer_bytes` it has not
taken (unless the batch is the one held of what the rank needs next, so that the rank never waits on itself).

Exactly once with retried tasks: a partition gives the same rows in the same order on every attempt (Spark's
own premise when it recomputes one), so a share keeps only the rows past those it already holds; an attempt
that died half way and its retry together give each row once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections import deque

from sparkrunner.channel import ChannelServer, Connection
from sparkrunner.channel import messages as m
from sparkrunner.common.checks import configured_port_range
from sparkrunner.data.shards import Slice
from sparkrunner.data.stream_handle import StreamData
from sparkrunner.errors import ChannelError, StreamFeedError
from sparkrunner.system.network import server_port

log = logging.getLogger(__name__)

Queued = tuple[bytes, int, int]  # an IPC batch and the rows [start, stop) of it that belong to the share


class Share:
    """One rank's share of one pass: its slices, the rows of each held so far, and what it has not taken."""

    def __init__(self, slices: list[Slice], buffer_bytes: int, changed: threading.Condition) -> None:
        self.slices = slices
        self.queues: list[deque[Queued]] = [deque() for _ in slices]
        self.held = [0] * len(slices)
        self.head = 0
        self.buffered = 0
        self.buffer_bytes = buffer_bytes
        self.parked: list[tuple[Connection, list[int]]] = []  # acks waiting for room: (feeder, slices fed)
        self.failure: str | None = None
        self.over = False
        """The broker confirmed the pass: every partition gave exactly the rows counted."""
        self._changed = changed

    def feed(self, conn: Connection, partition: int, batch: m.FeedBatch) -> None:
        """Queue the batch's rows for every slice they belong to; ack now, or once the rank took enough."""
        fed = []
        for index, piece in enumerate(self.slices):
            if piece.group != partition:
                continue
            expected = piece.start + self.held[index]
            low, high = max(batch.offset, expected), min(batch.offset + batch.rows, piece.stop)
            if low >= high:
                if batch.offset < expected and batch.offset + batch.rows > piece.start:
                    log.debug(
                        "partition %d: rows %d.. already held (a retried task)", partition, batch.offset
                    )
                continue  # rows another attempt already gave, or rows of another slice
            if low > expected:
                self.fail(
                    f"rows {expected}..{low} of partition {partition} never arrived (a sparkrunner bug)"
                )
                return
            self.queues[index].append((batch.ipc, low - batch.offset, high - batch.offset))
            self.held[index] += high - low
            self.buffered += len(batch.ipc)
            fed.append(index)
        if fed:
            self._changed.notify_all()
        if all(self._roomy(index) for index in fed):
            _send(conn, m.FeedAck())
        else:
            self.parked.append((conn, fed))

    def take(self) -> Queued | None:
        """The share's next batch in its order, once it arrived; None when the share is complete."""
        with self._changed:
            while True:
                while (
                    self.head < len(self.slices) and not self.queues[self.head] and self._complete(self.head)
                ):
                    self.head += 1
                if self.head == len(self.slices):
                    return None
                if self.failure is not None:
                    raise StreamFeedError(self.failure)
                if self.queues[self.head]:
                    taken = self.queues[self.head].popleft()
                    self.buffered -= len(taken[0])
                    self._release()
                    return taken
                self._release()  # the head moved: a batch parked for it may now go
                self._changed.wait()

    def fail(self, text: str) -> None:
        with self._changed:
            if self.failure is None:
                self.failure = text
                self._changed.notify_all()

    def end(self) -> None:
        """The broker's verdict that the pass is over and sound."""
        with self._changed:
            self.over = True
            self._changed.notify_all()

    def wait_for_verdict(self) -> None:
        """Once every row of the share was taken: block until the broker confirms the pass (StreamFeedError if
        it failed instead, e.g. a partition gave rows past those counted, which reached no rank)."""
        with self._changed:
            while not self.over and self.failure is None:
                self._changed.wait()
            if self.failure is not None:
                raise StreamFeedError(self.failure)

    def drop_feeder(self, conn: Connection) -> None:
        self.parked = [(other, fed) for other, fed in self.parked if other is not conn]

    def _complete(self, index: int) -> bool:
        piece = self.slices[index]
        return self.held[index] == piece.stop - piece.start

    def _roomy(self, index: int) -> bool:
        return self.buffered <= self.buffer_bytes or (index == self.head and len(self.queues[index]) <= 1)

    def _release(self) -> None:
        ready = [(conn, fed) for conn, fed in self.parked if all(self._roomy(index) for index in fed)]
        self.parked = [entry for entry in self.parked if entry not in ready]
        for conn, _ in ready:
            _send(conn, m.FeedAck())


class Inbox:
    """The server of one stream in this process; it routes each feeder's batches to the share it names."""

    def __init__(self, secret: bytes, host: str) -> None:
        self.host = host
        self._changed = threading.Condition()
        self._shares: dict[str, Share] = {}  # token -> the share of a pass this process reads now
        self._feeders: dict[Connection, tuple[str, int]] = {}  # feeder -> (token, partition)
        port = server_port(host, configured_port_range())  # the run's range, in every rank's environment
        self._server = ChannelServer(secret, m.serving(self._handle), self._disconnected, host, port)

    @property
    def port(self) -> int:
        return self._server.port

    def open(self, token: str, slices: list[Slice], buffer_bytes: int) -> Share:
        with self._changed:
            share = self._shares[token] = Share(slices, buffer_bytes, self._changed)
            return share

    def forget(self, token: str) -> None:
        """The pass is over here: batches still sent for it (a late retry) are acked and dropped."""
        with self._changed:
            self._shares.pop(token, None)

    def _handle(self, conn: Connection, message: m.Message) -> None:
        with self._changed:
            match message:
                case m.FeedStart(token=token, partition=partition):
                    self._feeders[conn] = (token, partition)
                case m.FeedBatch():
                    token, partition = self._feeders.get(conn, ("", -1))
                    share = self._shares.get(token)
                    if share is None or share.failure is not None:
                        _send(conn, m.FeedAck())  # a pass over here: let the task end
                    else:
                        share.feed(conn, partition, message)
                case _:
                    raise ChannelError(f"a rank's stream server got an unexpected {message.kind!r}")

    def _disconnected(self, conn: Connection) -> None:
        with self._changed:
            token, _ = self._feeders.pop(conn, ("", -1))
            share = self._shares.get(token)
            if share is not None:
                share.drop_feeder(conn)

    def close(self) -> None:
        self._server.close()


_INBOXES: dict[str, Inbox] = {}  # stream id -> its server in this process
_LOCK = threading.Lock()


def inbox(data: StreamData, host: str) -> Inbox:
    """This process's server for `data` (started on its first pass, at `host`; closed with the handle)."""
    with _LOCK:
        found = _INBOXES.get(data.stream_id)
        if found is None:
            found = _INBOXES[data.stream_id] = Inbox(data.secret, host)
            weakref.finalize(data, _close, data.stream_id)
        return found


def _close(stream_id: str) -> None:
    with _LOCK:
        found = _INBOXES.pop(stream_id, None)
    if found is not None:
        found.close()


def _send(conn: Connection, message: m.Message) -> None:
    with contextlib.suppress(ChannelError):  # a feeder that went away is noticed by its disconnect
        m.send(conn, message)
