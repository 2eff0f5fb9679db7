"""A Spark task's side of a stream: push one partition's Arrow record batches to the driver's broker.

It runs inside `DataFrame.mapInArrow`, so whatever `df`'s plan computes (pandas UDFs, SQL, Spark ML
transformers) runs here, on a free slot, while the ranks train. At most `WINDOW` batches wait for the broker's
ack: a rank that lags holds its feeders back instead of filling memory, and an ack's round trip does not stall
Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from sparkrunner.channel import Connection, connect
from sparkrunner.channel import messages as m
from sparkrunner.channel.messages import FeedAck, FeedBatch, FeedStart
from sparkrunner.errors import ChannelError

WINDOW = 4
"""Batches a feeder sends ahead of their acks: Spark computes the next ones while the broker routes these."""

RESULT_SCHEMA = "rows long"
"""What a feeder task returns to the driver's job: the rows it fed."""


def feeder(
    address: tuple[str, int], secret: bytes, stream_id: str, pass_id: int
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The `mapInArrow` function that feeds the broker's pass `pass_id` of the stream."""

    def feed(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        context = _task_context()
        partition, attempt = context.partitionId(), context.attemptNumber()
        conn = connect(address, secret)
        try:
            m.send(conn, FeedStart(stream_id, pass_id, partition, attempt))
            offset, unacked = 0, 0
            for batch in batches:
                if batch.num_rows:
                    if unacked == WINDOW:
                        _await_ack(conn)
                        unacked -= 1
                    m.send(conn, FeedBatch(offset, batch.num_rows, _ipc(batch)))
                    unacked += 1
                offset += batch.num_rows
            for _ in range(unacked):
                _await_ack(conn)
        finally:
            conn.close()
        yield pa.RecordBatch.from_pydict({"rows": [offset]})

    return feed


def _ipc(batch: Any) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def _await_ack(conn: Connection) -> None:
    reply = m.receive(conn)
    if not isinstance(reply, FeedAck):
        raise ChannelError(f"the stream's broker answered a batch with {reply.kind!r}")


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
