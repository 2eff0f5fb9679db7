"""A rank's side of a stream: pull this rank's batches of one pass from the driver's broker, as numpy chunks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sparkrunner.channel import Connection, connect
from sparkrunner.channel import messages as m
from sparkrunner.channel.messages import StreamBatch, StreamEnd, StreamFailed, StreamNext, StreamOpen
from sparkrunner.data.columns import Chunk, to_numpy
from sparkrunner.data.stream_handle import StreamData
from sparkrunner.errors import ChannelError, StreamFeedError

# batches asked for ahead of the one being decoded: hides the round trip to the broker
_REQUESTS_AHEAD = 2


def read_pass(data: StreamData, names: Sequence[str], opened: StreamOpen) -> Iterator[Chunk]:
    """Every batch of the rank's share of one pass, in the plan's order; StreamFeedError when it cannot end."""
    import pyarrow as pa

    conn = connect(data.address, data.secret)
    try:
        m.send(conn, opened)
        for _ in range(_REQUESTS_AHEAD):
            m.send(conn, StreamNext())
        while True:
            match _receive(conn, opened):
                case StreamBatch(ipc=ipc, start=start, stop=stop):
                    m.send(conn, StreamNext())
                    batch = pa.ipc.open_stream(ipc).read_next_batch().select(list(names))
                    yield to_numpy(batch.slice(start, stop - start))
                case StreamEnd():
                    return
                case StreamFailed(text=text):
                    raise StreamFeedError(text)
                case other:
                    raise ChannelError(f"the stream's broker sent an unexpected {other.kind!r}")
    finally:
        conn.close()


def _receive(conn: Connection, opened: StreamOpen) -> m.Message:
    try:
        return m.receive(conn)
    except ChannelError as exc:
        raise StreamFeedError(
            f"rank {opened.rank} lost the driver's stream broker during epoch {opened.epoch}: {exc} (did the "
            "driver close the stream, or end?)"
        ) from exc
