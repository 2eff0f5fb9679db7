"""`inmemory_cache_all` in a rank: after its first whole pass, the loader's rows come from memory (the Parquet
files may be gone), the same rows of the rank in the same number of batches, reshuffled each epoch."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from sparkrunner.data import NumpyLoader, materialize
from sparkrunner.ml.ranks.in_memory import InMemory
from tests.data.readers import epoch_ids, write_dataset


def test_later_epochs_serve_the_first_passs_rows_from_memory_reshuffled(tmp_path: Path) -> None:
    data = materialize(write_dataset(tmp_path / "ds", [60, 40], row_group_rows=10))
    loader = NumpyLoader(data, 8, shuffle=True, seed=3, rank=1, world_size=2)
    kept = InMemory(loader, shuffle=True, seed=3)
    first = epoch_ids(kept, 0)  # type: ignore[arg-type]  # a NumpyLoader for the checks it makes
    shutil.rmtree(tmp_path / "ds")  # nothing is read after the first pass
    second, third = epoch_ids(kept, 1), epoch_ids(kept, 2)  # type: ignore[arg-type]
    assert len(first) == len(second) == len(third) == len(loader)
    assert sorted(np.concatenate(first)) == sorted(np.concatenate(second)) == sorted(np.concatenate(third))
    assert not np.array_equal(np.concatenate(second), np.concatenate(third))
