"""A rank's side of a stream: open a pass with the driver's broker, then take this rank's batches as feeder tasks
push them to the rank's own server (`stream_inbox`), as numpy chunks."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterator, Sequence

from sparkrunner.channel import Connection, connect
from sparkrunner.channel import messages as m
from sparkrunner.channel.messages import StreamEnd, StreamFailed, StreamOpen, StreamPassOver
from sparkrunner.data.columns import Chunk, to_numpy
from sparkrunner.data.ranks import stream_inbox
from sparkrunner.data.stream_handle import StreamData, rank_share
from sparkrunner.errors import ChannelError


def read_pass(data: StreamData, names: Sequence[str], opened: StreamOpen) -> Iterator[Chunk]:
    """Every batch of the rank's share of one pass, in the plan's order, then the broker's verdict on the whole
    pass; StreamFeedError when the pass fails."""
    import pyarrow as pa

    control = connect(data.address, data.secret)
    try:
        inbox = stream_inbox.inbox(data, control.local_host())
        token = uuid.uuid4().hex
        share = inbox.open(
            token, rank_share(data, opened.epoch, opened.rank, opened.rows_per_rank), data.buffer_bytes
        )
        try:
            m.send(control, dataclasses.replace(opened, host=inbox.host, port=inbox.port, token=token))
            threading.Thread(
                target=_watch, args=(control, share, opened), name="sparkrunner-stream-watch", daemon=True
            ).start()
            while (taken := share.take()) is not None:
                ipc, start, stop = taken
                batch = pa.ipc.open_stream(ipc).read_next_batch().select(list(names))
                yield to_numpy(batch.slice(start, stop - start))
            m.send(control, StreamEnd())
            share.wait_for_verdict()
        finally:
            inbox.forget(token)
    finally:
        control.close()


def _watch(control: Connection, share: stream_inbox.Share, opened: StreamOpen) -> None:
    """Hand the broker's verdict on the pass to the share: over, failed, or the broker lost."""
    try:
        message = m.receive(control)
        if isinstance(message, StreamPassOver):
            share.end()
            return
        text = (
            message.text
            if isinstance(message, StreamFailed)
            else f"the stream's broker sent an unexpected {message.kind!r}"
        )
    except ChannelError as exc:
        text = (
            f"rank {opened.rank} lost the driver's stream broker during epoch {opened.epoch}: {exc} (did the "
            "driver close the stream, or end?)"
        )
    share.fail(text)
