"""Shard and step planning from global metadata alone, so every rank computes the same plan without talking.

The native reader splits rows: the epoch's row-group order (seeded by (seed, epoch), the same on every rank)
is laid end to end and cut into ``world_size`` contiguous ranges of ``steps * batch_size`` rows. Petastorm
splits row groups: rank r reads row groups ``i`` with ``i % world_size == r``; ranks with more rows stop at
the common step count ("drop") or ranks with fewer rows wrap around ("pad").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from sparkrunner.common.checks import check_choice
from sparkrunner.errors import NotEnoughDataError

REMAINDERS = ("drop", "pad")
DEFAULT_REMAINDER = "drop"


@dataclass(frozen=True)
class Slice:
    """Rows ``[start, stop)`` of row group number `group` (an index into ParquetData.row_groups)."""

    group: int
    start: int
    stop: int


def epoch_rng(seed: int, epoch: int, *tag: int) -> np.random.Generator:
    """The generator for one (seed, epoch) decision; `tag` separates independent decisions (seed 0 is real)."""
    return np.random.default_rng(np.random.SeedSequence([seed, epoch, *tag]))


def check_remainder(remainder: str) -> None:
    check_choice("remainder", remainder, REMAINDERS)


def row_split_steps(num_rows: int, world_size: int, batch_size: int, remainder: str) -> int:
    """Steps per epoch, the same on every rank, when rows are split evenly across ranks."""
    per_step = world_size * batch_size
    steps = num_rows // per_step if remainder == "drop" else math.ceil(num_rows / per_step)
    if steps == 0:
        raise NotEnoughDataError(
            f"the dataset has {num_rows} rows, fewer than one batch of {batch_size} for each of {world_size} "
            f"ranks ({per_step} rows): use a smaller batch_size, fewer ranks, or remainder='pad'"
        )
    return steps


def group_split_steps(group_rows: Sequence[int], world_size: int, batch_size: int, remainder: str) -> int:
    """Steps per epoch, the same on every rank, when rank r reads row groups i with i % world_size == r."""
    shard_rows = [sum(group_rows[r::world_size]) for r in range(world_size)]
    if min(shard_rows) == 0:
        raise NotEnoughDataError(
            f"the dataset has {len(group_rows)} Parquet row groups, so some of the {world_size} ranks would get "
            "none (Petastorm shards by row group): materialize with smaller files (max_rows_per_file) or use "
            "reader='arrow'"
        )
    steps = min(shard_rows) // batch_size if remainder == "drop" else math.ceil(max(shard_rows) / batch_size)
    if steps == 0:
        raise NotEnoughDataError(
            f"the smallest shard has {min(shard_rows)} rows, fewer than one batch of {batch_size}: use a smaller "
            "batch_size, fewer ranks, or remainder='pad'"
        )
    return steps


def group_order(num_groups: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """The epoch's row-group order, identical on every rank."""
    if not shuffle:
        return np.arange(num_groups)
    return epoch_rng(seed, epoch, 0).permutation(num_groups)


def rank_slices(
    group_rows: Sequence[int], order: Iterable[int], rank: int, rows_per_rank: int
) -> list[Slice]:
    """Rank's contiguous range of the epoch's row sequence (row groups in `order`, wrapping around if short)."""
    begin, end = rank * rows_per_rank, (rank + 1) * rows_per_rank
    total = sum(group_rows)
    slices: list[Slice] = []
    position = (begin // total) * total  # start of the pass of the sequence that holds `begin`
    while position < end:
        for group in order:
            rows = group_rows[group]
            lo, hi = max(begin, position), min(end, position + rows)
            if lo < hi:
                slices.append(Slice(int(group), lo - position, hi - position))
            position += rows
            if position >= end:
                break
    return slices
