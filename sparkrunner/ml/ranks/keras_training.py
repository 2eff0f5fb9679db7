"""The training loop of `KerasEstimator`, in every rank: the model compiled again under TensorFlow's
MultiWorkerMirroredStrategy (one worker per rank, `TF_CONFIG` set by sparkrunner), each rank's batches from
its own shard with equal steps on every rank, and Keras' ``fit`` doing the rest."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import cloudpickle
import numpy as np

from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.ranks.loader import NumpyLoader
from sparkrunner.data.stream_handle import StreamData
from sparkrunner.ml import features, keras_models
from sparkrunner.ml.ranks.training import validation_batch_size
from sparkrunner.ml.spec import KerasSpec, TrainResult
from sparkrunner.ranks.api import rank_context
from sparkrunner.ranks.progress import keras_callback

Data = ParquetData | StreamData


def train(spec: KerasSpec, train_data: Data, val_data: Data | None) -> TrainResult | None:
    """Fit `spec`'s model on this rank's shard of `train_data`; rank 0 returns the model and its history."""
    import tensorflow as tf

    world = rank_context().world_size
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if world > 1 else tf.distribute.get_strategy()
    keras = importlib.import_module(spec.package)
    keras.utils.set_random_seed(spec.seed)
    with strategy.scope():
        model = cloudpickle.loads(spec.model)
        optimizer, loss, metrics = cloudpickle.loads(spec.compiled)
        model.compile(optimizer=keras.optimizers.get(optimizer), loss=loss, metrics=metrics or None)
    columns = [*spec.feature_cols, *spec.label_cols, *filter(None, [spec.sample_weight_col])]
    train_loader = NumpyLoader(
        train_data, spec.batch_size, columns=columns, shuffle=spec.shuffle, seed=spec.seed
    )
    val_loader = None
    if val_data is not None:
        size = validation_batch_size(val_data.num_rows, world, spec.batch_size)
        val_loader = NumpyLoader(val_data, size, columns=columns, shuffle=False)
    fitted = model.fit(
        _input(keras, spec, train_loader, world),
        epochs=spec.epochs,
        steps_per_epoch=len(train_loader),
        validation_data=None if val_loader is None else _input(keras, spec, val_loader, world),
        validation_steps=None if val_loader is None else len(val_loader),
        verbose=0,
        callbacks=[keras_callback()] if spec.verbose else [],
    )
    if rank_context().rank != 0:
        return None
    history = {name: [float(v) for v in values] for name, values in fitted.history.items()}
    return TrainResult(keras_models.packed(model), history, int(model.output_shape[-1]))


def _input(keras: Any, spec: KerasSpec, loader: NumpyLoader, world: int) -> Any:
    """The rank's batches for ``fit``: under several workers a `DatasetCreator`, so that each worker's batches
    stay its own (a plain dataset would be re-batched across the workers)."""
    if world == 1:
        return _dataset(spec, loader)
    return keras.utils.experimental.DatasetCreator(lambda context: _dataset(spec, loader))


def _dataset(spec: KerasSpec, loader: NumpyLoader) -> Any:
    """``(features, labels[, weights])`` batches, every epoch's in turn, as a repeating ``tf.data`` dataset."""
    import tensorflow as tf

    def batches() -> Iterator[tuple[Any, ...]]:
        epoch = 0
        while True:
            loader.set_epoch(epoch)
            for batch in loader.untimed():
                x = features.matrix([batch[c] for c in spec.feature_cols])
                y = features.matrix([batch[c] for c in spec.label_cols])
                weights = [] if spec.sample_weight_col is None else [batch[spec.sample_weight_col]]
                yield (x, y, *[w.astype("float32") for w in weights])
            epoch += 1

    widths = {column.name: int(np.prod(column.shape)) for column in loader.data.columns}
    x, y = (
        tf.TensorSpec((None, sum(widths[c] for c in cols)), tf.float32)
        for cols in (spec.feature_cols, spec.label_cols)
    )
    signature = (x, y, *([tf.TensorSpec((None,), tf.float32)] if spec.sample_weight_col else []))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf.data.Dataset.from_generator(batches, output_signature=signature).with_options(options)
