"""The Petastorm reader: this rank's row-group shard through petastorm.make_batch_reader (pyarrow < 15 only)."""

from __future__ import annotations

import itertools
import posixpath
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from sparkrunner.common.storage import Location
from sparkrunner.data.columns import Chunk
from sparkrunner.data.dataset import ParquetData, path_in
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
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*DaskFileSystem")
    urls, filesystem = _petastorm_source(data, data.location())
    for repeat in itertools.count():
        reader_seed = int(epoch_rng(seed, epoch, 2, repeat).integers(2**31))
        with make_batch_reader(
            urls,
            filesystem=filesystem,
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


def _petastorm_source(data: ParquetData, root: Location) -> tuple[list[str], Any]:
    """The dataset's files (in the order row groups are planned) as file:// URLs, and the filesystem to read
    them with: None (Petastorm's own) for local paths and mounts; else ours, seen from the dataset's folder
    and wrapped as the legacy filesystem Petastorm's ParquetDataset takes (pyarrow < 15)."""
    paths = [path_in(root, file.name) for file in data.files]
    if root.is_local:
        return [f"file://{path}" for path in paths], None
    import pyarrow.filesystem as legacy
    import pyarrow.fs as pafs
    from fsspec.implementations.arrow import ArrowFSWrapper

    base = root.path if data.files[0].name else posixpath.dirname(root.path)
    folder = pafs.SubTreeFileSystem(base, root.filesystem)
    urls = [f"file:///{posixpath.relpath(path, base)}" for path in paths]

    class LegacyView(legacy.DaskFileSystem):  # the two checks ParquetDataset makes
        def isdir(self, path: str) -> bool:
            return bool(self.fs.isdir(path))

        def isfile(self, path: str) -> bool:
            return bool(self.fs.isfile(path))

    return urls, LegacyView(ArrowFSWrapper(folder))


def _dense(values: np.ndarray) -> np.ndarray:
    """Petastorm gives list columns as object arrays of arrays: stack them into (rows, length)."""
    return np.stack(list(values)) if values.dtype == object else values
