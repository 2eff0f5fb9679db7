"""A Spark task's side of a stream: push one partition's Arrow record batches straight to the ranks that take them.

It runs inside `DataFrame.mapInArrow`, so whatever `df`'s plan computes (pandas UDFs, SQL, Spark ML
transformers) runs here, on a free slot, while the ranks train. The driver's broker gives it, in its closure,
the ranks its partition's rows go to (`Target`); it sends each rank only the rows of its range, over the
rank's own encrypted connection. It tells the broker when it starts and when it has pushed every row, so that
a job that fails names the partition whose task failed (Spark 4 reports only the task's own error). At most
`WINDOW` batches wait for a rank's ack: a rank that lags holds its feeders back instead of filling memory, and
an ack's round trip does not stall Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from sparkrunner.channel import connect
from sparkrunner.channel import messages as m
from sparkrunner.channel.messages import FeedAck, FeedBatch, FeederFinished, FeederStarted, FeedStart
from sparkrunner.errors import ChannelError

WINDOW = 4
"""Batches a feeder sends a rank ahead of their acks: Spark computes the next ones while the rank takes these."""

RESULT_SCHEMA = "partition int, rows long"
"""What a feeder task returns to the driver's job: its partition and the rows it gave."""


class Target(NamedTuple):
    """A rank that takes rows ``[start, stop)`` of a partition: its stream server and its pass's token."""

    host: str
    port: int
    token: str
    start: int
    stop: int


class _Link:
    """One feeder's connection to one rank, with the batches it sent that the rank has not acked yet."""

    def __init__(self, target: Target, secret: bytes, start: FeedStart) -> None:
        self.conn = connect((target.host, target.port), secret)
        self.unacked = 0
        m.send(self.conn, start)

    def send(self, batch: FeedBatch) -> None:
        if self.unacked == WINDOW:
            self._await_ack()
        m.send(self.conn, batch)
        self.unacked += 1

    def drain(self) -> None:
        while self.unacked:
            self._await_ack()

    def _await_ack(self) -> None:
        reply = m.receive(self.conn)
        if not isinstance(reply, FeedAck):
            raise ChannelError(f"a rank's stream server answered a batch with {reply.kind!r}")
        self.unacked -= 1


class FeedJob(NamedTuple):
    """What every feeder task of one pass needs: the stream, its broker and the pass's targets per partition."""

    stream_id: str
    broker: tuple[str, int]
    pass_id: int
    targets: Mapping[int, Sequence[Target]]


def feeder(job: FeedJob, secret: bytes) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The `mapInArrow` function of one pass: partition p's rows go to ``job.targets[p]`` (none: nobody needs
    them)."""

    def feed(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        context = _task_context()
        partition, attempt = context.partitionId(), context.attemptNumber()
        broker = _tell_broker(job, secret, FeederStarted(job.stream_id, job.pass_id, partition, attempt))
        mine = job.targets.get(partition, ())
        links: dict[Target, _Link] = {}
        offset = 0
        try:
            for batch in batches:
                for target in mine:
                    low, high = max(offset, target.start), min(offset + batch.num_rows, target.stop)
                    if low < high:
                        if target not in links:
                            links[target] = _Link(
                                target, secret, FeedStart(job.stream_id, target.token, partition, attempt)
                            )
                        links[target].send(
                            FeedBatch(low, high - low, _ipc(batch.slice(low - offset, high - low)))
                        )
                offset += batch.num_rows
            for link in links.values():
                link.drain()
            if broker is not None:
                _send_quietly(broker, FeederFinished(job.stream_id, job.pass_id, partition))
        finally:
            for conn in [link.conn for link in links.values()] + ([broker] if broker is not None else []):
                conn.close()
        yield pa.RecordBatch.from_pydict(
            {"partition": [partition], "rows": [offset]},
            schema=pa.schema([("partition", pa.int32()), ("rows", pa.int64())]),
        )

    return feed


def _tell_broker(job: FeedJob, secret: bytes, started: FeederStarted) -> Any:
    """A connection to the broker that announced this task, or None: the broker only names failures, so a
    feeder that cannot reach it still feeds."""
    try:
        conn = connect(job.broker, secret)
    except (ChannelError, OSError):
        return None
    return conn if _send_quietly(conn, started) else None


def _send_quietly(conn: Any, message: m.Message) -> bool:
    try:
        m.send(conn, message)
    except (ChannelError, OSError):
        return False
    return True


def _ipc(batch: Any) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


COUNT_SCHEMA = "partition int, rows long, list_lengths string"
"""What the counting pass returns per partition: its rows, and its first row's list lengths (JSON)."""


def partition_counter(lists: tuple[str, ...]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The `mapInArrow` function of `stream`'s counting pass, over the lengths of the `lists` columns (and a
    hash of the others): one record per partition, empty ones included."""

    def count(batches: Iterator[Any]) -> Iterator[Any]:
        import json

        import pyarrow as pa

        rows, lengths = 0, {}
        for batch in batches:
            if not rows and batch.num_rows:
                lengths = {name: int(batch.column(name)[0].as_py() or 0) for name in lists}
            rows += batch.num_rows
        yield pa.RecordBatch.from_pydict(
            {
                "partition": [_task_context().partitionId()],
                "rows": [rows],
                "list_lengths": [json.dumps(lengths)],
            },
            schema=pa.schema(
                [("partition", pa.int32()), ("rows", pa.int64()), ("list_lengths", pa.string())]
            ),
        )

    return count


def _task_context() -> Any:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("a stream's feeder runs only inside a Spark task")
    return context
