"""The TensorFlow input: the rank's batches as a ``tf.data.Dataset`` of ``{column: tensor}``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sparkrunner.data.columns import Chunk
from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.ranks.loader import NumpyLoader
from sparkrunner.data.stream_handle import StreamData


def tf_dataset(data: ParquetData | StreamData, batch_size: int, epochs: int = 1, **options: Any) -> Any:
    """`epochs` epochs of this rank's batches (epoch e shuffled by (seed, e)); options as NumpyLoader.

    Every rank yields ``len(NumpyLoader(...)) * epochs`` batches: pass ``steps_per_epoch`` to Keras.
    """
    import tensorflow as tf

    loader = NumpyLoader(data, batch_size, **options)
    specs = {
        column.name: tf.TensorSpec((batch_size, *column.shape), tf.dtypes.as_dtype(column.dtype))
        for column in data.columns
        if column.name in loader.columns
    }

    def generate() -> Iterator[Chunk]:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            yield from loader.untimed()  # tf.data reads ahead: steps come from the Keras callback

    return tf.data.Dataset.from_generator(generate, output_signature=specs)
