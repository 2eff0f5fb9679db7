"""The messages of `sparkrunner.data.stream`: ranks pull batches from the driver's broker, Spark feeder tasks
push a partition's Arrow record batches to it (kinds registered with the rest of the wire protocol)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkrunner.channel.messages import Message

# rank -> broker


@dataclass(frozen=True)
class StreamOpen(Message, kind="stream_open"):
    """A rank starts a pass over the stream: its share is planned from these numbers, as on every rank."""

    stream: str
    iteration: int
    """How many passes this rank's loader made before (the same on every rank)."""
    epoch: int
    rank: int
    world_size: int
    rows_per_rank: int


@dataclass(frozen=True)
class StreamNext(Message, kind="stream_next"):
    """The rank wants its next batch (one request, one answer: the rank's buffer bounds what it holds)."""


# broker -> rank


@dataclass(frozen=True)
class StreamBatch(Message, kind="stream_batch"):
    """Rows ``[start, stop)`` of one Arrow IPC record batch, the next ones of the rank's share."""

    ipc: bytes
    start: int
    stop: int


@dataclass(frozen=True)
class StreamEnd(Message, kind="stream_end"):
    """The rank has every row of its share for this pass."""


@dataclass(frozen=True)
class StreamFailed(Message, kind="stream_failed"):
    """The pass cannot complete (a feeder failed for good): why, in words."""

    text: str


# feeder task -> broker


@dataclass(frozen=True)
class FeedStart(Message, kind="feed_start"):
    """The first message of a feeder task: which pass, partition and Spark attempt it feeds."""

    stream: str
    iteration: int
    partition: int
    attempt: int


@dataclass(frozen=True)
class FeedBatch(Message, kind="feed_batch"):
    """The partition's rows ``[offset, offset + rows)`` as one Arrow IPC record batch; answered by FeedAck."""

    offset: int
    rows: int
    ipc: bytes


@dataclass(frozen=True)
class FeedAck(Message, kind="feed_ack"):
    """The broker holds the batch: the feeder may send the next (the ack waits while the ranks lag)."""
