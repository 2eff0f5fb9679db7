"""The Petastorm reader: this rank's row-group shard through petastorm.make_batch_reader (pyarrow < 15 only)."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Sequence

import numpy as np

from sparkrunner.data.columns import Chunk
from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.shards import epoch_rng
from sparkrunner.errors import ReaderUnavailableError


def check_available() -> None:
    """Fail with a clear message where Petastorm cannot be imported (it needs pyarrow < 15 and numpy < 2)."""
    try:
        import petastorm  # noqa: F401
    except ImportError as error:
        raise ReaderUnavailableError(
            f"reader='petastorm' needs the petastorm package, which cannot be imported here ({error}). Petastorm "
            "works only with pyarrow < 15 and numpy < 2; use reader='arrow' (the default) on current versions"
        ) from error


def read_shard(
    data: ParquetData,
    names: Sequence[str],
    rank: int,
    world_size: int,
    shuffle: bool,
    seed: int,
    epoch: int,
    depth: int,
) -> Iterator[Chunk]:
    """This rank's rows, over and over (the caller takes what the epoch needs); each pass is one reader."""
    from petastorm import make_batch_reader

    # Petastorm calls pyarrow APIs deprecated since 5.0 on every read: keep its warnings out of the user's log
    warnings.filterwarnings("ignore", category=FutureWarning, module="petastorm")
    for repeat in itertools.count():
        reader_seed = int(epoch_rng(seed, epoch, 2, repeat).integers(2**31))
        with make_batch_reader(
            "file://" + data.path,
            schema_fields=list(names),
            cur_shard=rank,
            shard_count=world_size,
            shuffle_row_groups=shuffle,
            seed=reader_seed if shuffle else None,  # petastorm reorders the shard by any seed
            num_epochs=1,
            reader_pool_type="thread",
            workers_count=1,  # one worker keeps the order reproducible for a given seed
            results_queue_size=depth,
        ) as reader:
            for batch in reader:
                values = batch._asdict()
                yield {name: _dense(values[name]) for name in names}


def _dense(values: np.ndarray) -> np.ndarray:
    """Petastorm gives list columns as object arrays of arrays: stack them into (rows, length)."""
    return np.stack(list(values)) if values.dtype == object else values
