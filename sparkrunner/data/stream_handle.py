"""The handle of a streamed DataFrame, and the plan of one pass that the driver's broker and every rank compute
alike: which partition rows each rank gets, in which order."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkrunner.data import shards
from sparkrunner.data.columns import Column


@dataclass(frozen=True, repr=False)
class StreamData:
    """A DataFrame streamed by Spark tasks while the ranks train: no copy is written anywhere.

    Small and picklable: pass it to ``Runner.run`` like a materialized dataset and read it with the same
    loaders. It carries the driver broker's address and the secret of its encrypted connections, the rows of
    every partition (counted once by `stream`), the shuffle settings that plan each pass and the ranks' buffer
    bound.
    """

    stream_id: str
    address: tuple[str, int]
    secret: bytes = field(compare=False)
    columns: tuple[Column, ...]
    partition_rows: tuple[int, ...]
    shuffle: bool
    seed: int
    buffer_bytes: int
    """The bound on the batches each rank holds that it has not taken yet."""

    @property
    def num_rows(self) -> int:
        return sum(self.partition_rows)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def __repr__(self) -> str:
        shown = ", ".join(f"{c.name}: {c.dtype}{list(c.shape) if c.shape else ''}" for c in self.columns)
        return (
            f"StreamData({self.num_rows:,} rows in {len(self.partition_rows)} partitions, "
            f"{len(self.columns)} columns [{shown}], shuffle={self.shuffle}, seed={self.seed})"
        )


def rank_share(data: StreamData, epoch: int, rank: int, rows_per_rank: int) -> list[shards.Slice]:
    """Rank's rows of one pass: the seeded partition order cut as materialized data is, then taken by partition
    number, the order in which Spark runs the feeder tasks (so a rank never waits on a task not yet started
    while others fill its buffer)."""
    order = shards.group_order(len(data.partition_rows), data.shuffle, data.seed, epoch)
    slices = shards.rank_slices(data.partition_rows, order, rank, rows_per_rank)
    return sorted(slices, key=lambda piece: (piece.group, piece.start))
