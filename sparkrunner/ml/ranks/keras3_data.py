"""A rank's batches for Keras 3's ``fit`` (imported once Keras 3 is, on its torch backend): `PyDataset`s that
Keras reads in step order, one step at a time, so that epoch ``e``'s rows are read only when Keras asks for its
first step, after epoch ``e - 1`` ended. Keras asks for one batch ahead of the first epoch (to build its metrics):
that batch is the first epoch's first, kept and served again, so no pass is opened twice."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import keras

Batch = tuple[Any, ...]


class EpochBatches(keras.utils.PyDataset):
    """Epoch by epoch from `start`: `open_epoch(epoch)` gives the epoch's `steps` batches, opened on its first
    step."""

    def __init__(self, steps: int, start: int, open_epoch: Callable[[int], Iterator[Batch]]) -> None:
        super().__init__(workers=1, use_multiprocessing=False)
        self._steps, self._open = steps, open_epoch
        self._epoch, self._begun = start, False
        self._batches: Iterator[Batch] | None = None
        self._last: tuple[tuple[int, int], Batch] | None = None

    def __len__(self) -> int:
        return self._steps

    def on_epoch_begin(self) -> None:
        if self._begun:
            self._epoch, self._batches = self._epoch + 1, None
        self._begun = True

    def __getitem__(self, step: int) -> Batch:
        key = (self._epoch, step)
        if (
            self._last is not None and self._last[0] == key
        ):  # the batch Keras looked at before the first epoch
            return self._last[1]
        if self._batches is None:
            self._batches = self._open(self._epoch)
        batch = next(self._batches)
        self._last = (key, batch)
        return batch


class HeldBatches(keras.utils.PyDataset):
    """The rank's validation batches: `read()` once, on the first request, then served from memory."""

    def __init__(self, steps: int, read: Callable[[], Iterator[Batch]]) -> None:
        super().__init__(workers=1, use_multiprocessing=False)
        self._steps, self._read = steps, read
        self._held: list[Batch] = []

    def __len__(self) -> int:
        return self._steps

    def __getitem__(self, step: int) -> Batch:
        if not self._held:
            self._held = list(self._read())
        return self._held[step]
