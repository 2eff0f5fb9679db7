"""The tf.data input: the rank's batches for every epoch, typed and shaped from the dataset's metadata."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sparkrunner.data import NumpyLoader, materialize, tf_dataset
from tests.data.readers import write_dataset


def test_tf_dataset_yields_every_epoch_of_the_ranks_shard(tmp_path: Path) -> None:
    data = materialize(write_dataset(tmp_path / "ds", [100, 70], row_group_rows=32))
    steps = len(NumpyLoader(data, 10, rank=1, world_size=2))
    dataset = tf_dataset(data, 10, epochs=2, rank=1, world_size=2, seed=4)
    assert dataset.element_spec["x"].shape == (10, 2) and dataset.element_spec["y"].dtype.name == "int32"
    batches = [batch["id"].numpy() for batch in dataset]
    assert len(batches) == 2 * steps
    epochs = [np.concatenate(batches[:steps]), np.concatenate(batches[steps:])]
    assert not np.array_equal(epochs[0], epochs[1]), "epoch 1 repeated epoch 0"
    assert len(set(epochs[0])) == steps * 10
