"""The driver's side of a stream: the coordinator of its passes. No row passes through it.

Every rank opens a pass on its own connection, naming the server it listens on (`stream_inbox`); once every
rank opened it, the broker runs `df` as a Spark job whose tasks (`stream_feeder`) push each partition's rows
straight to the ranks whose shares hold them. The broker plans those targets, runs and watches the job, and
tells the ranks why a pass failed (a feeder failed for good, a partition gave other rows than counted, a rank
left early: then it cancels the feeders). Feeder tasks tell it when they start and finish, so that a failed
job names the partition whose task failed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from sparkrunner.channel import ChannelServer, Connection, new_secret
from sparkrunner.channel import messages as m
from sparkrunner.common.checks import configured_port_range
from sparkrunner.data.stream_handle import StreamData, rank_share
from sparkrunner.data.workers.stream_feeder import RESULT_SCHEMA, FeedJob, Target, feeder
from sparkrunner.errors import ChannelError
from sparkrunner.placement.background_job import short_spark_error
from sparkrunner.placement.spark_sessions import cancel_tagged, jobs_tagged
from sparkrunner.system.network import server_port

log = logging.getLogger(__name__)

_FAILED_TASK = re.compile(r"Task (\d+) in stage \d+")
"""How Spark 3.5 names the task that failed a job (Spark 4 reports only the task's own error)."""


@dataclass
class _Rank:
    """A rank in a pass: its connection, what it opened the pass with, and whether it has its whole share."""

    conn: Connection
    opened: m.StreamOpen
    done: bool = False


class _Pass:
    """One pass over the stream: its ranks and the Spark job that feeds them."""

    def __init__(self, data: StreamData, opened: m.StreamOpen, pass_id: int, shuffles: bool) -> None:
        self.id = pass_id
        self.shuffles = shuffles
        self.data = data
        self.opened = opened
        self.ranks: dict[int, _Rank] = {}
        self.failure: str | None = None
        self.tag = f"sparkrunner-stream-{uuid.uuid4().hex[:12]}"
        self.job_running = False
        self.feeders: dict[int, int] = {}
        """Partition -> the attempt number of its feeder task running now (started, not finished)."""

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
        self.ranks[opened.rank] = _Rank(conn, opened)
        if self.failure is not None:
            _send(conn, m.StreamFailed(self.failure))

    def everyone_opened(self) -> bool:
        return len(self.ranks) == self.opened.world_size

    def targets(self) -> dict[int, list[Target]]:
        """Partition -> the ranks its rows go to, each with the range of them its share holds."""
        found: dict[int, list[Target]] = {}
        for rank in self.ranks.values():
            opened = rank.opened
            ranges: dict[int, tuple[int, int]] = {}
            for piece in rank_share(self.data, opened.epoch, opened.rank, opened.rows_per_rank):
                low, high = ranges.get(piece.group, (piece.start, piece.stop))
                ranges[piece.group] = (min(low, piece.start), max(high, piece.stop))
            for partition, (low, high) in ranges.items():
                found.setdefault(partition, []).append(
                    Target(opened.host, opened.port, opened.token, low, high)
                )
        return found

    def fail(self, text: str, whole_shares_too: bool = True) -> None:
        """Tell the pass's ranks that it failed; with `whole_shares_too` False, a rank whose share is whole
        hears that its pass is over instead (a rank that left early spoils nobody else's rows)."""
        if self.failure is None:
            self.failure = text
            for rank in self.ranks.values():
                failed = whole_shares_too or not rank.done
                _send(rank.conn, m.StreamFailed(text) if failed else m.StreamPassOver())

    def job_ended(self, error: BaseException | None, fed: dict[int, int]) -> None:
        """The verdict on the pass, to every rank: a failed feeder, a partition that gave more or fewer rows
        than counted (rows past the count go to no rank), or the pass over."""
        if error is not None:
            self.fail(f"{self._failed_task(error)} failed in epoch {self.opened.epoch} of the streamed DataFrame: "
                      f"{short_spark_error(error)}")  # fmt: skip
            return
        for partition, counted in enumerate(self.data.partition_rows):
            if fed.get(partition, 0) != counted:
                self.fail(
                    f"partition {partition} of the streamed DataFrame gave {fed.get(partition, 0)} rows in epoch "
                    f"{self.opened.epoch} where `stream` counted {counted}: its rows changed since. A streamed "
                    "DataFrame must give the same rows on every pass: persist() it, or avoid nondeterministic "
                    "steps (rand(), sampling, repartition without a sort)"
                )
                return
        for rank in self.ranks.values():
            _send(rank.conn, m.StreamPassOver())

    def _failed_task(self, error: BaseException) -> str:
        """The feeder task that failed the job. Where Spark names the task, and the feeders' job is one stage (a
        plan with no exchange: a task's number is its partition), that one; else, of the feeders that announced
        themselves and never finished, the one Spark tried most often (the others were stopped when the job
        failed), or each of them when that is a tie."""
        found = None if self.shuffles else _FAILED_TASK.search(_chained_text(error))
        if found is not None:
            return f"the feeder task of partition {found.group(1)}"
        if not self.feeders:
            return "a feeder task"
        most = max(self.feeders.values())
        failed = sorted(p for p, attempt in self.feeders.items() if attempt == most)
        return f"the feeder task of partition {' or '.join(map(str, failed))}"

    def all_done(self) -> bool:
        return self.failure is not None or all(rank.done for rank in self.ranks.values())


def _chained_text(error: BaseException) -> str:
    """The text of `error` and of the exceptions it was raised from or during (pyspark raises a task's Python
    error "from None", leaving Spark's own message in its context)."""
    texts: list[str] = []
    current: BaseException | None = error
    while current is not None and len(texts) < 8:
        texts.append(str(current))
        current = current.__cause__ or current.__context__
    return "\n".join(texts)


def _send(conn: Connection, message: m.Message) -> None:
    with contextlib.suppress(ChannelError):  # a peer that went away is noticed by its disconnect
        m.send(conn, message)


class StreamBroker:
    """Coordinates one stream's passes on the driver until `close`; one `_Pass` per loader iteration.

    A rank joins the oldest pass of its loader's iteration that it has not opened yet: ranks that start a new
    loader (iteration 0 again) begin a new pass, never one still ending."""

    def __init__(self, frame: Any, bind_host: str, shuffles: bool) -> None:
        self.frame = frame
        self.shuffles = shuffles
        """Whether `frame`'s plan has an exchange (its feeders' job then has stages before theirs)."""
        self.secret = new_secret()
        self.data: StreamData | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._passes: dict[int, _Pass] = {}  # pass id -> a pass not over
        self._joining: dict[int, list[_Pass]] = {}  # loader iteration -> passes not every rank opened yet
        self._roles: dict[Connection, tuple[_Pass, int]] = {}  # a rank's conn -> (its pass, its rank)
        port = server_port(bind_host, configured_port_range())
        self._server = ChannelServer(
            self.secret, m.serving(self._handle), self._disconnected, bind_host, port
        )

    @property
    def port(self) -> int:
        return self._server.port

    def _handle(self, conn: Connection, message: m.Message) -> None:
        with self._lock:
            match message:
                case m.StreamOpen():
                    self._open(conn, message)
                case m.StreamEnd():
                    current, rank = self._roles[conn]
                    current.ranks[rank].done = True
                    self._forget_if_over(current)
                case m.FeederStarted(pass_id=pass_id, partition=partition, attempt=attempt):
                    if pass_id in self._passes:
                        self._passes[pass_id].feeders[partition] = attempt
                case m.FeederFinished(pass_id=pass_id, partition=partition):
                    if pass_id in self._passes:
                        self._passes[pass_id].feeders.pop(partition, None)
                case _:
                    raise ChannelError(f"the stream broker got an unexpected {message.kind!r}")

    def _open(self, conn: Connection, opened: m.StreamOpen) -> None:
        assert self.data is not None
        waiting = self._joining.setdefault(opened.iteration, [])
        current = next((pass_ for pass_ in waiting if opened.rank not in pass_.ranks), None)
        if current is None:
            current = _Pass(self.data, opened, next(self._ids), self.shuffles)
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
        with self._lock:
            job = FeedJob(self.data.stream_id, self.data.address, current.id, current.targets())
        feed = feeder(job, self.secret)
        error: BaseException | None = None
        fed: dict[int, int] = {}
        try:
            with jobs_tagged(spark, current.tag):
                rows = self.frame.mapInArrow(feed, RESULT_SCHEMA).collect()
            fed = {row["partition"]: row["rows"] for row in rows}
        except BaseException as exc:
            error = exc
        with self._lock:
            current.job_running = False
            if current.id in self._passes:
                current.job_ended(error, fed)
                self._forget_if_over(current)

    def _forget_if_over(self, current: _Pass) -> None:
        if current.all_done() and not current.job_running:
            self._passes.pop(current.id, None)

    def _disconnected(self, conn: Connection) -> None:
        with self._lock:
            current, rank = self._roles.pop(conn, (None, -1))
            if current is None or current.id not in self._passes:
                return
            if not current.ranks[rank].done and current.failure is None:
                log.debug(
                    "rank %d left pass %d of the stream early: cancelling its feeders", rank, current.id
                )
                self._abandon(current)

    def _abandon(self, current: _Pass) -> None:
        current.fail(f"rank left pass {current.opened.iteration} before its end", whole_shares_too=False)
        del self._passes[current.id]
        self._stop_joining(current)
        if current.job_running:
            with contextlib.suppress(Exception):
                cancel_tagged(self.frame.sparkSession, current.tag)

    def close(self) -> None:
        """Stop serving: cancel the feeders of passes still running, close every connection."""
        with self._lock:
            for current in list(self._passes.values()):
                self._abandon(current)
        self._server.close()
