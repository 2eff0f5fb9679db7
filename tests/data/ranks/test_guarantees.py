"""The reader guarantees, each checked against both readers on real Parquet files."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from sparkrunner.data import NumpyLoader, ParquetData, TorchLoader, materialize
from sparkrunner.errors import InvalidArgumentError, NotEnoughDataError
from tests.data.readers import both_readers, epoch_ids, write_dataset
from tests.data.s3_server import S3Server
from tests.waiting import poll_until

# 3 files of uneven size, row groups of 40 rows (the last one of each file shorter): 17 row groups, 610 rows
FILE_ROWS = [250, 200, 160]
TOTAL = sum(FILE_ROWS)


@pytest.fixture(params=["local", "s3"])
def data(request: pytest.FixtureRequest, tmp_path: Path) -> ParquetData:
    """The same files on the local disk, or on a real S3-API server (read back through s3:// URIs)."""
    local = write_dataset(tmp_path / "ds", FILE_ROWS, row_group_rows=40)
    if request.param == "local":
        return materialize(local)
    s3: S3Server = request.getfixturevalue("s3")
    uri = s3.new_prefix()
    s3.upload(local, uri)
    return materialize(uri, storage_options=s3.storage_options)


def loaders(data: ParquetData, reader: str, world: int, **options: object) -> list[NumpyLoader]:
    return [NumpyLoader(data, rank=r, world_size=world, reader=reader, **options) for r in range(world)]  # type: ignore[arg-type]


@both_readers
@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_every_rank_gets_the_same_number_of_full_batches(
    data: ParquetData, reader: str, remainder: str
) -> None:
    for world in (2, 3):
        ranks = loaders(data, reader, world, batch_size=16, remainder=remainder)
        steps = {len(loader) for loader in ranks}
        assert len(steps) == 1, f"ranks disagree on steps per epoch: {steps}"
        for loader in ranks:
            assert len(epoch_ids(loader, epoch=0)) == len(loader)


@both_readers
def test_drop_gives_disjoint_shards_that_leave_out_less_than_a_step(data: ParquetData, reader: str) -> None:
    for epoch in range(3):
        ranks = loaders(data, reader, 3, batch_size=16, remainder="drop", seed=7)
        shards = [np.concatenate(epoch_ids(loader, epoch)) for loader in ranks]
        seen = np.concatenate(shards)
        assert len(np.unique(seen)) == len(seen), f"epoch {epoch}: a row went to two ranks"
        left_out = TOTAL - len(seen)
        if reader == "arrow":  # row split: only the remainder of the last step is dropped
            assert 0 <= left_out < 3 * 16
        else:  # row-group split: the longer shards stop at the shortest shard's last full batch
            group_rows = [g.num_rows for g in data.row_groups]
            shortest = min(sum(group_rows[r::3]) for r in range(3))
            assert len(seen) == 3 * (shortest // 16) * 16


@both_readers
def test_pad_covers_every_row_and_repeats_only_to_fill(data: ParquetData, reader: str) -> None:
    ranks = loaders(data, reader, 3, batch_size=16, remainder="pad", seed=3)
    shards = [np.concatenate(epoch_ids(loader, 1)) for loader in ranks]
    seen = np.concatenate(shards)
    reads = np.bincount(seen, minlength=TOTAL)
    assert reads.min() == 1, "pad must cover every row"
    steps = len(ranks[0])
    assert len(seen) == 3 * steps * 16
    padding = len(seen) - TOTAL
    assert reads.max() == 2 and (reads == 2).sum() == padding, "only the padding may repeat rows"


@both_readers
def test_shuffle_is_seeded_by_seed_and_epoch(data: ParquetData, reader: str) -> None:
    def order(seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
        loader = NumpyLoader(data, 16, rank=1, world_size=2, reader=reader, seed=seed, shuffle=shuffle)
        return np.concatenate(epoch_ids(loader, epoch))

    first = order(seed=0, epoch=0)
    np.testing.assert_array_equal(order(seed=0, epoch=0), first)  # seed 0 reproduces like any seed
    assert not np.array_equal(order(seed=0, epoch=1), first)  # a new order every epoch
    assert not np.array_equal(order(seed=1, epoch=0), first)  # another seed, another order
    assert not np.array_equal(order(seed=0, epoch=0, shuffle=False), first)  # seed 0 does shuffle
    np.testing.assert_array_equal(
        order(seed=0, epoch=0, shuffle=False), order(seed=5, epoch=3, shuffle=False)
    )


@both_readers
def test_fails_fast_when_a_rank_would_get_no_batch(tmp_path: Path, reader: str) -> None:
    small = materialize(write_dataset(tmp_path / "small", [30], row_group_rows=10))
    with pytest.raises(NotEnoughDataError, match="batch_size"):
        NumpyLoader(small, 16, rank=0, world_size=2, reader=reader)
    assert len(NumpyLoader(small, 16, rank=1, world_size=2, reader=reader, remainder="pad")) >= 1
    one_group = materialize(write_dataset(tmp_path / "one-group", [30], row_group_rows=30))
    if reader == "petastorm":  # Petastorm shards whole row groups: one group cannot feed two ranks
        with pytest.raises(NotEnoughDataError, match="row groups"):
            NumpyLoader(one_group, 4, rank=0, world_size=2, reader=reader)
    else:
        assert len(NumpyLoader(one_group, 4, rank=0, world_size=2, reader=reader)) == 3


def _quiet_threads(baseline: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since `baseline` that are still alive after up to 5 s."""
    poll_until(lambda: not _new_threads(baseline), 5)
    return _new_threads(baseline)


def _new_threads(baseline: set[threading.Thread]) -> list[threading.Thread]:
    """Live threads that are not in `baseline`."""
    return [t for t in threading.enumerate() if t not in baseline and t.is_alive()]


@both_readers
def test_stops_cleanly_on_early_exit_and_on_error(data: ParquetData, reader: str) -> None:
    baseline = set(threading.enumerate())
    children = set(psutil.Process().children(recursive=True))  # e.g. a Spark JVM from another module
    loader = NumpyLoader(data, 8, rank=0, world_size=2, reader=reader, prefetch=1)
    for _ in loader:
        break
    assert _quiet_threads(baseline) == []
    with pytest.raises(KeyError):
        for batch in TorchLoader(data, 8, rank=1, world_size=2, reader=reader):
            batch["missing"]
    assert _quiet_threads(baseline) == []
    assert set(psutil.Process().children(recursive=True)) <= children


@both_readers
def test_prefetch_holds_a_bounded_number_of_chunks(data: ParquetData, reader: str) -> None:
    loader = NumpyLoader(data, 4, rank=0, world_size=1, reader=reader, prefetch=2, shuffle=False)
    produced = []
    read = loader._read

    def counting():  # type: ignore[no-untyped-def]
        for chunk in read():
            produced.append(len(chunk["id"]))
            yield chunk

    loader._read = counting  # type: ignore[method-assign]
    batches = iter(loader)
    next(batches)
    settled = -1
    while settled != len(produced):  # wait until the reader thread blocks on the full queue
        settled = len(produced)
        time.sleep(0.3)
    batches.close()  # type: ignore[attr-defined]
    # one chunk being batched, `prefetch` in the queue, one waiting to be put: far from all 17 row groups
    assert settled <= 1 + 2 + 1
    assert len(produced) == settled, "the reader went on reading after the loop stopped"


@both_readers
def test_torch_loader_gives_tensors_of_the_dataset_types(data: ParquetData, reader: str) -> None:
    import torch

    loader = TorchLoader(data, 32, rank=0, world_size=2, reader=reader)
    batches = list(loader)
    assert len(batches) == len(loader) >= 1
    assert batches[0]["x"].dtype == torch.float32 and batches[0]["x"].shape == (32, 2)
    assert batches[0]["id"].dtype == torch.int64 and batches[0]["y"].dtype == torch.int32


def test_options_are_checked_before_reading(data: ParquetData, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="no Parquet dataset"):
        materialize(tmp_path / "missing")
    for bad in (
        {"batch_size": 0},
        {"seed": -1},
        {"remainder": "keep"},
        {"reader": "tfrecord"},
        {"columns": ["z"]},
    ):
        options = {"batch_size": 4, **bad}
        with pytest.raises(InvalidArgumentError):
            NumpyLoader(data, **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="rank 2"):
        NumpyLoader(data, 4, rank=2, world_size=2)


def test_runs_on_current_pyarrow_and_numpy() -> None:
    """The main environment is the current stack: the native reader must work there (Petastorm cannot)."""
    import pyarrow

    assert int(pyarrow.__version__.split(".")[0]) >= 18
    assert int(np.__version__.split(".")[0]) >= 2
