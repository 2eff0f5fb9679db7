"""Loaders resume mid-epoch at another world size: every row of the epoch is read once (oracle: count ids)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sparkrunner.data import NumpyLoader, ParquetData, global_batch, materialize
from sparkrunner.errors import InvalidArgumentError
from tests.data.readers import write_dataset

# 3 files of uneven size, row groups of 40 rows: 17 row groups, 610 rows
FILE_ROWS = [250, 200, 160]
TOTAL = sum(FILE_ROWS)
BATCH = 8


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> ParquetData:
    return materialize(write_dataset(tmp_path_factory.mktemp("ds") / "ds", FILE_ROWS, row_group_rows=40))


def read_steps(
    data: ParquetData,
    world: int,
    steps: int | None,
    state: dict | None,
    batch: int = BATCH,
    **options: object,
) -> tuple[list[np.ndarray], dict]:
    """`steps` batches (None: to the epoch's end) on each of `world` ranks resumed from `state`; the ids read
    and rank 0's state after them."""
    ids, states = [], []
    for rank in range(world):
        loader = NumpyLoader(data, batch, rank=rank, world_size=world, **options)  # type: ignore[arg-type]
        loader.set_epoch(2)
        if state is not None:
            loader.load_state_dict(state)
        ids += [batch["id"] for batch in itertools.islice(loader, steps)]  # pulls no batch it does not use
        states.append(loader.state_dict())
    assert all(s == states[0] for s in states), "every rank must describe the epoch the same way"
    return ids, states[0]


@pytest.mark.parametrize(
    "options",
    [{"shuffle": False}, {"shuffle": True, "seed": 5, "shuffle_buffer_rows": 100}],
    ids=["in-order", "shuffled"],
)
def test_an_epoch_resumed_at_4_then_2_then_3_ranks_reads_every_row_once(
    data: ParquetData, options: dict
) -> None:
    first, state = read_steps(data, 4, 5, None, **options)
    second, state = read_steps(data, 2, 7, state, 2 * BATCH, **options)  # the same global batch
    last, state = read_steps(data, 3, None, state, **options)
    reads = np.bincount(np.concatenate(first + second + last), minlength=TOTAL)
    assert reads.max() == 1, f"rows read twice: {np.flatnonzero(reads > 1)}"
    assert (reads == 0).sum() < 3 * BATCH, "only the last step's remainder may be left out of the epoch"
    assert len(first) == 4 * 5 and len(second) == 2 * 7
    assert state["segments"][:2] == [(4, BATCH, 5), (2, 2 * BATCH, 7)]


def test_an_uninterrupted_epoch_is_unchanged_by_saving_its_state(data: ParquetData) -> None:
    """Resuming from a state taken before any step reads what an epoch start reads, batch for batch."""
    plain, _ = read_steps(data, 2, None, None, shuffle=True, seed=1)
    resumed, _ = read_steps(data, 2, None, {"epoch": 2, "segments": [], "rows": TOTAL}, shuffle=True, seed=1)
    assert [b.tolist() for b in plain] == [b.tolist() for b in resumed]


def test_a_state_from_other_data_is_refused(data: ParquetData) -> None:
    loader = NumpyLoader(data, BATCH, rank=0, world_size=2)
    with pytest.raises(InvalidArgumentError, match="dataset of 99 rows"):
        loader.load_state_dict({"epoch": 0, "segments": [(2, BATCH, 1)], "rows": 99})


@pytest.mark.parametrize(("world", "split"), [(4, (8, 2)), (2, (8, 4)), (3, None)])
def test_global_batch_keeps_the_global_batch(world: int, split: tuple[int, int] | None) -> None:
    if split is None:
        with pytest.raises(InvalidArgumentError, match="cannot be split evenly over 3 ranks"):
            global_batch(64, max_per_rank=8, world_size=world)
        return
    plan = global_batch(64, max_per_rank=8, world_size=world)
    assert (plan.per_rank, plan.accumulation) == split
    assert plan.world_size * plan.per_rank * plan.accumulation == 64
