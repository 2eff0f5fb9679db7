"""Mid-epoch resume at any world size: which rows of an epoch are left, and how the new ranks split them.

An epoch's rows form one sequence (row groups in the epoch's seeded order, laid end to end; a row is its
position there). A loader's state is the epoch and its *segments*: ``(world_size, batch_size, steps)`` for
each stretch of the epoch run at one size (the per-rank batch may change with it, see `global_batch`). What a rank of a segment read is fully determined by the metadata, the seed and
the segment (its range of the sequence, cut into one chunk per row-group run, shuffled by a seeded generator
that only looks at chunk sizes), so any rank replays every segment without reading data or talking to its
peers, removes what was read, and splits the rest among the new world size, exactly as an epoch start
splits the whole sequence. No row is read twice or left out of the epoch, except the last step's remainder
(``remainder="drop"``), as at any epoch end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from sparkrunner.data import shards
from sparkrunner.data.ranks import batching
from sparkrunner.data.shards import Slice


@dataclass(frozen=True)
class Plan:
    """What fixes an epoch's row sequence and each rank's order in it (a loader's options)."""

    group_rows: Sequence[int]
    batch_size: int
    shuffle: bool
    seed: int
    epoch: int
    remainder: str
    shuffle_buffer_rows: int

    def order(self) -> np.ndarray:
        return shards.group_order(len(self.group_rows), self.shuffle, self.seed, self.epoch)

    def rng(self, rank: int, segment: int) -> np.random.Generator:
        """The rank's row-shuffle generator; segment 0 keeps the one an uninterrupted epoch uses."""
        tags = (1, rank) if segment == 0 else (1, rank, segment)
        return shards.epoch_rng(self.seed, self.epoch, *tags)

    def steps(self, rows: int, world_size: int) -> int:
        """Steps of a segment over `rows` rows left (0 when fewer than one step is left)."""
        per_step = world_size * self.batch_size
        return rows // per_step if self.remainder == "drop" else -(-rows // per_step)


def rows_left(plan: Plan, segments: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """The epoch sequence's positions no segment read, in sequence order."""
    left = np.arange(sum(plan.group_rows), dtype=np.int64)
    for number, (world_size, batch_size, steps) in enumerate(segments):
        then = replace(plan, batch_size=batch_size)
        read = [
            rank_order(then, left, world_size, r, number)[: steps * batch_size] for r in range(world_size)
        ]
        left = left[~np.isin(left, np.concatenate([left[:0], *read]))]
    return left


def rank_range(plan: Plan, left: np.ndarray, world_size: int, rank: int) -> np.ndarray:
    """The rank's contiguous range of the rows left (wrapping around to fill, with ``remainder="pad"``)."""
    per_rank = plan.steps(len(left), world_size) * plan.batch_size
    if len(left) == 0 or per_rank == 0:
        return left[:0]
    return left[np.arange(rank * per_rank, (rank + 1) * per_rank) % len(left)]


def rank_order(plan: Plan, left: np.ndarray, world_size: int, rank: int, segment: int) -> np.ndarray:
    """The positions the rank yields, in yield order: its range's chunks, shuffled as the reader does."""
    chunks = [{"position": part} for part in _runs(plan, rank_range(plan, left, world_size, rank))]
    if not plan.shuffle:
        return np.concatenate([c["position"] for c in chunks]) if chunks else left[:0]
    mixed = batching.shuffled(chunks, plan.rng(rank, segment), plan.shuffle_buffer_rows)
    return np.concatenate([c["position"] for c in mixed]) if chunks else left[:0]


def rank_slices(plan: Plan, left: np.ndarray, world_size: int, rank: int) -> list[Slice]:
    """The row-group slices the reader reads for the rank's range of the rows left (one chunk each)."""
    order = plan.order()
    starts = np.concatenate([[0], np.cumsum(np.asarray(plan.group_rows)[order])])
    slices = []
    for part in _runs(plan, rank_range(plan, left, world_size, rank)):
        index = int(np.searchsorted(starts, part[0], side="right") - 1)
        offset = int(part[0] - starts[index])
        slices.append(Slice(int(order[index]), offset, offset + len(part)))
    return slices


def _runs(plan: Plan, positions: np.ndarray) -> list[np.ndarray]:
    """`positions` cut where they stop being consecutive or cross a row-group boundary (one slice each)."""
    if len(positions) == 0:
        return []
    order = plan.order()
    starts = np.cumsum(np.asarray(plan.group_rows)[order])
    group = np.searchsorted(starts, positions, side="right")
    cuts = np.flatnonzero((np.diff(positions) != 1) | (np.diff(group) != 0)) + 1
    return np.split(positions, cuts)
