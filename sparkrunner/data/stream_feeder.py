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


def _task_context() -> Any:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("a stream's feeder runs only inside a Spark task")
    return context
