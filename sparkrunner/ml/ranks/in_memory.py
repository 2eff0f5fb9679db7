"""Horovod's `inmemory_cache_all` for the torch loops: a loader whose batches are read in the first epoch and
served from memory after it (`data.ranks.memory_epochs`, which the Keras loop uses too)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from sparkrunner.data.ranks.loader import NumpyLoader
from sparkrunner.data.ranks.memory_epochs import MemoryEpochs
from sparkrunner.ranks.anatomy import timed


class InMemory:
    """The batches of `loader`: read through it in the first epoch, from memory after it, in ``len(loader)``
    batches of the loader's size (every rank still takes the same steps), reshuffled per epoch with `shuffle`."""

    def __init__(self, loader: NumpyLoader, shuffle: bool, seed: int) -> None:
        self.loader = loader
        self.data = loader.data
        self.batch_size = loader.batch_size
        self.epoch = 0
        self._memory = MemoryEpochs(loader.batch_size, shuffle, seed)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.loader.set_epoch(epoch)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        holding = self._memory.holding  # the loader times its own reads; memory's are timed here
        batches = self._memory.epoch(self.epoch, lambda: iter(self.loader))
        return timed(batches) if holding else batches
