"""The plan of one stream pass (`rank_share`): against a row-by-row oracle, every row once across the ranks
(all of them when the ranks' rows add up to the dataset), shares in partition order, the same for the same
seed and epoch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sparkrunner.data.stream_handle import StreamData, rank_share


def handle(partition_rows: tuple[int, ...], seed: int = 5) -> StreamData:
    return StreamData("s", ("127.0.0.1", 1), b"k", (), partition_rows, True, seed, 1)


def rows_of(data: StreamData, epoch: int, rank: int, rows_per_rank: int) -> list[tuple[int, int]]:
    """(partition, row) pairs of the share, in its order."""
    share = rank_share(data, epoch, rank, rows_per_rank)
    return [(piece.group, row) for piece in share for row in range(piece.start, piece.stop)]


@pytest.mark.parametrize("partition_rows", [(7, 0, 13, 5, 11), (40,), (3, 3, 3, 3)])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_row_at_most_once_and_all_when_they_add_up(
    partition_rows: tuple[int, ...], world_size: int
) -> None:
    data = handle(partition_rows)
    everything = {(p, r) for p, rows in enumerate(partition_rows) for r in range(rows)}
    rows_per_rank = sum(partition_rows) // world_size
    taken = [pair for rank in range(world_size) for pair in rows_of(data, 0, rank, rows_per_rank)]
    assert len(taken) == len(set(taken)) == rows_per_rank * world_size and set(taken) <= everything
    if rows_per_rank * world_size == sum(partition_rows):
        assert set(taken) == everything


def test_shares_follow_partition_order_and_the_seed() -> None:
    data = handle((6, 9, 4, 8, 5, 7))
    shares = {
        (epoch, rank): rows_of(data, epoch, rank, 19) for epoch, rank in itertools.product((0, 1), (0, 1))
    }
    for share in shares.values():
        assert share == sorted(share)
    assert shares[0, 0] == rows_of(handle((6, 9, 4, 8, 5, 7)), 0, 0, 19)
    assert shares[0, 0] != shares[1, 0]  # another epoch deals other rows to rank 0
    assert np.array_equal(rows_of(data, 0, 1, 19), shares[0, 1])
