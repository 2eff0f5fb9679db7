"""`MemoryEpochs` (Horovod's `inmemory_cache_all`): the first epoch is read, later ones come from memory with
the same rows in as many batches of the same size, reshuffled per epoch. Oracle: the rows the reader yielded."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from sparkrunner.data.ranks.memory_epochs import MemoryEpochs


def test_later_epochs_serve_the_first_epochs_rows_from_memory_reshuffled() -> None:
    reads: list[int] = []

    def read() -> Iterator[dict[str, np.ndarray]]:
        reads.append(1)
        for start in range(0, 12, 4):
            yield {"x": np.arange(start, start + 4), "y": np.arange(start, start + 4) * 10}

    kept = MemoryEpochs(batch_size=4, shuffle=True, seed=3)
    epochs = [list(kept.epoch(epoch, read)) for epoch in range(3)]

    assert len(reads) == 1
    for batches in epochs:
        assert [len(b["x"]) for b in batches] == [4, 4, 4]
        assert sorted(np.concatenate([b["x"] for b in batches]).tolist()) == list(range(12))
        assert all((b["y"] == b["x"] * 10).all() for b in batches)  # rows stay whole
    orders = [np.concatenate([b["x"] for b in batches]).tolist() for batches in epochs]
    assert orders[1] != orders[2] != list(range(12))


def test_a_first_pass_cut_short_keeps_nothing() -> None:
    kept = MemoryEpochs(batch_size=2, shuffle=False, seed=0)
    rows = ({"x": np.array([i, i])} for i in range(3))
    first = kept.epoch(0, lambda: rows)
    next(first)
    first.close()
    again = list(kept.epoch(1, lambda: iter([{"x": np.array([7, 8])}])))
    assert [b["x"].tolist() for b in again] == [[7, 8]]
