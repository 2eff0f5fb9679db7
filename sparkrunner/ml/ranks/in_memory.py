"""Horovod's `inmemory_cache_all`, in the ranks: a loader's batches kept in memory after its first whole pass, so
later epochs read no data (no Parquet file, no stream pass); each rank shuffles the rows it keeps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from sparkrunner.data.ranks.loader import NumpyLoader
from sparkrunner.ranks.anatomy import timed


class InMemory:
    """The batches of `loader`: read through it in the first epoch, from memory after it.

    The rank keeps the rows of its first pass (its shard of that epoch) and serves them again in ``len(loader)``
    batches of the loader's size, so every rank still takes the same steps; with `shuffle`, each later epoch's
    order is a permutation seeded by (seed, epoch, rank).
    """

    def __init__(self, loader: NumpyLoader, shuffle: bool, seed: int) -> None:
        self.loader = loader
        self.data = loader.data
        self.batch_size = loader.batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self._kept: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if self._kept is None:
            self.loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        if self._kept is None:
            return self._first_pass()
        return timed(self._from_memory(self._kept))

    def _first_pass(self) -> Iterator[dict[str, np.ndarray]]:
        batches = []
        for batch in self.loader:
            batches.append(batch)
            yield batch
        if batches and len(batches) == len(self.loader):  # a whole pass: one stopped early keeps nothing
            self._kept = {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}

    def _from_memory(self, kept: dict[str, Any]) -> Iterator[dict[str, np.ndarray]]:
        rows, size = len(next(iter(kept.values()))), self.batch_size
        order = np.arange(rows)
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch, self.loader.rank]).permutation(rows)
        for step in range(len(self)):
            index = order[step * size : (step + 1) * size]
            yield {name: values[index] for name, values in kept.items()}
