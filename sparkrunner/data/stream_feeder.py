"""A Spark task's side of a stream: push one partition's Arrow record batches to the driver's broker.

It runs inside `DataFrame.mapInArrow`, so whatever `df`'s plan computes (pandas UDFs, SQL, Spark ML
transformers) runs here, on a free slot, while the ranks train. Each batch waits for the broker's ack before
the next is sent: a rank that lags holds its feeders back instead of filling memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from sparkrunner.channel import Connection, connect
from sparkrunner.channel import messages as m
from sparkrunner.channel.messages import FeedAck, FeedBatch, FeedStart
from sparkrunner.errors import ChannelError

RESULT_SCHEMA = "rows long"
"""What a feeder task returns to the driver's job: the rows it fed."""


def feeder(
    address: tuple[str, int], secret: bytes, stream_id: str, iteration: int
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The `mapInArrow` function that feeds pass `iteration` of the stream."""

    def feed(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        context = _task_context()
        partition, attempt = context.partitionId(), context.attemptNumber()
        conn = connect(address, secret)
        try:
            m.send(conn, FeedStart(stream_id, iteration, partition, attempt))
            offset = 0
            for batch in batches:
                if batch.num_rows:
                    m.send(conn, FeedBatch(offset, batch.num_rows, _ipc(batch)))
                    _await_ack(conn)
                offset += batch.num_rows
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


def count_partition(batches: Iterator[Any]) -> Iterator[Any]:
    """The `mapInArrow` function of `stream`'s counting pass: one record per partition, empty ones included."""
    import json

    import pyarrow as pa

    from sparkrunner.data.columns import is_list

    rows, lengths = 0, {}
    for batch in batches:
        if not rows and batch.num_rows:
            first = batch.slice(0, 1)
            lengths = {
                f.name: len(first.column(f.name)[0].as_py() or []) for f in batch.schema if is_list(f.type)
            }
        rows += batch.num_rows
    partition = _task_context().partitionId()
    yield pa.RecordBatch.from_pydict(
        {"partition": [partition], "rows": [rows], "list_lengths": [json.dumps(lengths)]},
        schema=pa.schema([("partition", pa.int32()), ("rows", pa.int64()), ("list_lengths", pa.string())]),
    )


def _task_context() -> Any:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("a stream's feeder runs only inside a Spark task")
    return context
