"""Horovod's `inmemory_cache_all`: a rank keeps the rows of its first training epoch in memory and serves every
later epoch from there, reshuffled per (seed, epoch), in as many batches of the same size (so every rank still
takes the same steps), without reading the data again."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from sparkrunner.data.columns import Chunk


class MemoryEpochs:
    """The batches of each epoch: read (and kept) the first time, from memory afterwards."""

    def __init__(self, batch_size: int, shuffle: bool, seed: int) -> None:
        self._batch_size, self._shuffle, self._seed = batch_size, shuffle, seed
        self._held: dict[str, np.ndarray] | None = None
        self._steps = 0

    @property
    def holding(self) -> bool:
        """Whether a whole first pass is kept (later epochs read nothing)."""
        return self._held is not None

    def epoch(self, epoch: int, read: Callable[[], Iterator[Chunk]]) -> Iterator[Chunk]:
        """Epoch `epoch`'s batches: those of `read()` while nothing is kept, else the kept rows."""
        if self._held is None:
            yield from self._keep(read())
            return
        rows = self._steps * self._batch_size
        order = (
            np.random.default_rng((self._seed, epoch)).permutation(rows) if self._shuffle else np.arange(rows)
        )
        for step in range(self._steps):
            taken = order[step * self._batch_size : (step + 1) * self._batch_size]
            yield {name: values[taken] for name, values in self._held.items()}

    def _keep(self, batches: Iterator[Chunk]) -> Iterator[Chunk]:
        """`batches`, kept once the whole pass has been read (a pass cut short keeps nothing)."""
        kept = []
        for batch in batches:
            kept.append(batch)
            yield batch
        if kept:
            self._held = {name: np.concatenate([batch[name] for batch in kept]) for name in kept[0]}
            self._steps = len(kept)
