"""The driver's side of a stream: a broker between Spark feeder tasks and the ranks, one pass at a time.

Every rank opens a pass on its own connection and pulls batches (a request each); once every rank opened it,
the broker runs `df` as a Spark job whose tasks push their partition's batches (`stream_feeder`). A batch
goes to the ranks whose share holds its rows, each rank's in the order of its share. Bounded memory: a
feeder sends at most `stream_feeder.WINDOW` batches ahead of their acks, and an ack waits while a rank it
fed holds more than `buffer_bytes` not yet taken (unless it is the one batch held of what that rank needs
next, so that no rank ever waits on itself).

Exactly once with retried tasks: a partition gives the same rows in the same order on every attempt (Spark's
own premise when it recomputes one), so each share keeps only the rows past those it already holds; an
attempt that died half way and its retry together give each row once.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from sparkrunner.channel import ChannelServer, Connection, new_secret
from sparkrunner.channel import messages as m
from sparkrunner.data.shards import Slice
from sparkrunner.data.stream_feeder import RESULT_SCHEMA, feeder
from sparkrunner.data.stream_handle import StreamData, rank_share
from sparkrunner.errors import ChannelError
from sparkrunner.placement.background_job import short_spark_error

log = logging.getLogger(__name__)

_FAILED_TASK = re.compile(r"Task (\d+) in stage")
Queued = tuple[bytes, int, int]  # an IPC batch and the rows [start, stop) of it that belong to a share


@dataclass
class _Share:
    """One rank's share of a pass: its slices, the rows of each held so far, and what it has not taken."""

    conn: Connection
    slices: list[Slice]
    queues: list[deque[Queued]] = field(init=False)
    held: list[int] = field(init=False)
    head: int = 0
    buffered: int = 0
    wants: int = 0
    done: bool = False

    def __post_init__(self) -> None:
        self.queues = [deque() for _ in self.slices]
        self.held = [0] * len(self.slices)

    def complete(self, index: int) -> bool:
        piece = self.slices[index]
        return self.held[index] == piece.stop - piece.start


class _Pass:
    """One pass over the stream: the shares of every rank and the Spark job that feeds them."""

    def __init__(self, data: StreamData, opened: m.StreamOpen, buffer_bytes: int, pass_id: int) -> None:
        self.id = pass_id
        self.data = data
        self.opened = opened
        self.buffer_bytes = buffer_bytes
        self.shares: dict[int, _Share] = {}
        self.targets: dict[int, list[tuple[int, int]]] = {}
        self.parked: list[tuple[Connection, list[tuple[int, int]]]] = []
        self.failure: str | None = None
        self.tag = f"sparkrunner-stream-{uuid.uuid4().hex[:12]}"
        self.job_running = False

    def open(self, conn: Connection, opened: m.StreamOpen) -> None:
        first = self.opened
        if (opened.epoch, opened.world_size, opened.rows_per_rank) != (
            first.epoch,
            first.world_size,
            first.rows_per_rank,
        ):
            self.fail(
                f"the ranks disagree on pass {opened.iteration} of the stream: rank {first.rank} asked for epoch "
                f"{first.epoch} of {first.world_size} ranks x {first.rows_per_rank} rows, rank {opened.rank} for "
                f"epoch {opened.epoch} of {opened.world_size} x {opened.rows_per_rank}: give every rank's loader "
                "the same batch_size and remainder, and call set_epoch with the same epoch on every rank"
            )
        share = _Share(conn, rank_share(self.data, opened.epoch, opened.rank, opened.rows_per_rank))
        self.shares[opened.rank] = share
        for index, piece in enumerate(share.slices):
            self.targets.setdefault(piece.group, []).append((opened.rank, index))
        if self.failure is not None:
            _send(conn, m.StreamFailed(self.failure))

    def everyone_opened(self) -> bool:
        return len(self.shares) == self.opened.world_size

    def want(self, rank: int) -> None:
        self.shares[rank].wants += 1
        self.serve(rank)

    def feed(self, conn: Connection, partition: int, batch: m.FeedBatch) -> None:
        """Queue the batch's rows for every share they belong to; ack now or once the ranks took enough."""
        fed = []
        for rank, index in self.targets.get(partition, ()):
            share = self.shares[rank]
            piece = share.slices[index]
            expected = piece.start + share.held[index]
            low, high = max(batch.offset, expected), min(batch.offset + batch.rows, piece.stop)
            if low >= high:
                if batch.offset < expected and batch.offset + batch.rows > piece.start:
                    log.debug(
                        "partition %d: rows %d.. already held (a retried task)", partition, batch.offset
                    )
                continue  # rows another attempt already gave, or rows of another share
            if low > expected:
                self.fail(
                    f"rows {expected}..{low} of partition {partition} never arrived (a sparkrunner bug)"
                )
                return
            share.queues[index].append((batch.ipc, low - batch.offset, high - batch.offset))
            share.held[index] += high - low
            share.buffered += len(batch.ipc)
            fed.append((rank, index))
        for rank in {rank for rank, _ in fed}:
            self.serve(rank)
        if self._roomy(fed):
            _send(conn, m.FeedAck())
        else:
            self.parked.append((conn, fed))

    def _roomy(self, fed: list[tuple[int, int]]) -> bool:
        """Whether every share fed holds at most buffer_bytes, or one batch of what its rank needs next."""
        return all(
            self.shares[rank].buffered <= self.buffer_bytes
            or (index == self.shares[rank].head and len(self.shares[rank].queues[index]) <= 1)
            for rank, index in fed
        )

    def serve(self, rank: int) -> None:
        """Send the rank what it asked for and has arrived, in its share's order; then release parked acks."""
        share = self.shares[rank]
        while share.wants and not share.done and self.failure is None:
            while (
                share.head < len(share.slices) and not share.queues[share.head] and share.complete(share.head)
            ):
                share.head += 1
            if share.head == len(share.slices):
                share.done = True
                _send(share.conn, m.StreamEnd())
            elif share.queues[share.head]:
                ipc, start, stop = share.queues[share.head].popleft()
                share.buffered -= len(ipc)
                share.wants -= 1
                _send(share.conn, m.StreamBatch(ipc, start, stop))
            else:
                break
        still = [(conn, fed) for conn, fed in self.parked if not self._roomy(fed)]
        for conn, fed in self.parked:
            if self._roomy(fed):
                _send(conn, m.FeedAck())
        self.parked = still

    def fail(self, text: str) -> None:
        if self.failure is None:
            self.failure = text
            for share in self.shares.values():
                if not share.done:
                    _send(share.conn, m.StreamFailed(text))

    def job_ended(self, error: BaseException | None) -> None:
        if error is not None:
            self.fail(_feeder_failure(error, self.opened.epoch))
            return
        for share in self.shares.values():
            for index, piece in enumerate(share.slices):
                if not share.complete(index):
                    self.fail(
                        f"partition {piece.group} of the streamed DataFrame gave {share.held[index]} rows where "
                        f"rows {piece.start}..{piece.stop} were expected: its rows changed since `stream` counted "
                        "them. A streamed DataFrame must give the same rows on every pass: persist() it, or "
                        "avoid nondeterministic steps (rand(), sampling, repartition without a sort)"
                    )
                    return

    def all_done(self) -> bool:
        return self.failure is not None or all(share.done for share in self.shares.values())


def _feeder_failure(error: BaseException, epoch: int) -> str:
    found = _FAILED_TASK.search(str(error))
    which = f"the feeder task of partition {found.group(1)}" if found else "a feeder task"
    return f"{which} failed in epoch {epoch} of the streamed DataFrame: {short_spark_error(error)}"


def _send(conn: Connection, message: m.Message) -> None:
    with contextlib.suppress(ChannelError):  # a peer that went away is noticed by its disconnect
        m.send(conn, message)


class StreamBroker:
    """Serves one stream's passes on the driver until `close`; one `_Pass` per loader iteration.

    A rank joins the oldest pass of its loader's iteration that it has not opened yet: ranks that start a new
    loader (iteration 0 again) begin a new pass, never one still ending."""

    def __init__(self, frame: Any, buffer_bytes: int, bind_host: str) -> None:
        self.frame = frame
        self.secret = new_secret()
        self.data: StreamData | None = None
        self._buffer_bytes = buffer_bytes
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._passes: dict[int, _Pass] = {}  # pass id -> a pass not over
        self._joining: dict[int, list[_Pass]] = {}  # loader iteration -> passes not every rank opened yet
        self._roles: dict[Connection, tuple[_Pass, int]] = {}  # conn -> (its pass, rank or -1 - partition)
        self._server = ChannelServer(self.secret, m.serving(self._handle), self._disconnected, bind_host)

    @property
    def port(self) -> int:
        return self._server.port

    def _handle(self, conn: Connection, message: m.Message) -> None:
        with self._lock:
            match message:
                case m.StreamOpen():
                    self._open(conn, message)
                case m.StreamNext():
                    current, rank = self._roles[conn]
                    if current.id in self._passes:
                        current.want(rank)
                case m.FeedStart(pass_id=pass_id, partition=partition):
                    if pass_id in self._passes:
                        self._roles[conn] = (self._passes[pass_id], -1 - partition)
                case m.FeedBatch():
                    self._feed(conn, message)
                case _:
                    raise ChannelError(f"the stream broker got an unexpected {message.kind!r}")

    def _feed(self, conn: Connection, batch: m.FeedBatch) -> None:
        fed, role = self._roles.get(conn, (None, 0))
        if fed is None or fed.id not in self._passes or fed.failure is not None:
            _send(conn, m.FeedAck())  # a pass already over: let the task end
        else:
            fed.feed(conn, -1 - role, batch)

    def _open(self, conn: Connection, opened: m.StreamOpen) -> None:
        assert self.data is not None
        waiting = self._joining.setdefault(opened.iteration, [])
        current = next((pass_ for pass_ in waiting if opened.rank not in pass_.shares), None)
        if current is None:
            current = _Pass(self.data, opened, self._buffer_bytes, next(self._ids))
            waiting.append(current)
            self._passes[current.id] = current
        self._roles[conn] = (current, opened.rank)
        current.open(conn, opened)
        if current.everyone_opened():
            self._stop_joining(current)
            if current.failure is None:
                current.job_running = True
                threading.Thread(
                    target=self._run_job, args=(current,), name="sparkrunner-stream", daemon=True
                ).start()

    def _stop_joining(self, current: _Pass) -> None:
        waiting = self._joining.get(current.opened.iteration, [])
        if current in waiting:
            waiting.remove(current)
        if not waiting:
            self._joining.pop(current.opened.iteration, None)

    def _run_job(self, current: _Pass) -> None:
        """Run `df` once as feeder tasks (tagged, so that `close` or a rank leaving can cancel it)."""
        assert self.data is not None
        spark = self.frame.sparkSession
        feed = feeder(self.data.address, self.secret, self.data.stream_id, current.id)
        error: BaseException | None = None
        spark.addTag(current.tag)
        try:
            self.frame.mapInArrow(feed, RESULT_SCHEMA).collect()
        except BaseException as exc:
            error = exc
        finally:
            spark.removeTag(current.tag)
        with self._lock:
            current.job_running = False
            if current.id in self._passes:
                current.job_ended(error)
                if current.all_done():
                    del self._passes[current.id]

    def _disconnected(self, conn: Connection) -> None:
        with self._lock:
            current, role = self._roles.pop(conn, (None, -1))
            if current is None or current.id not in self._passes:
                return
            current.parked = [(c, fed) for c, fed in current.parked if c is not conn]
            share = current.shares.get(role) if role >= 0 else None
            if share is not None and not share.done and current.failure is None:
                log.debug(
                    "rank %d left pass %d of the stream early: cancelling its feeders", role, current.id
                )
                self._abandon(current)
            elif current.all_done() and not current.job_running:
                del self._passes[current.id]

    def _abandon(self, current: _Pass) -> None:
        current.fail(f"rank left pass {current.opened.iteration} before its end")
        del self._passes[current.id]
        self._stop_joining(current)
        if current.job_running:
            with contextlib.suppress(Exception):
                self.frame.sparkSession.interruptTag(current.tag)

    def close(self) -> None:
        """Stop serving: cancel the feeders of passes still running, close every connection."""
        with self._lock:
            for current in list(self._passes.values()):
                self._abandon(current)
        self._server.close()
