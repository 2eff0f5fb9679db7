"""The training loop of `KerasEstimator`, in every rank: the model compiled again under TensorFlow's
MultiWorkerMirroredStrategy (one worker per rank, `TF_CONFIG` set by sparkrunner), each rank's batches from
its own shard with equal steps on every rank, Keras' ``fit`` doing the rest, and a checkpoint per epoch (weights,
optimizer state, history) when the run has a folder for them, from which a retried attempt resumes."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import cloudpickle
import numpy as np

from sparkrunner.channel.environment import Env
from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.ranks.loader import NumpyLoader
from sparkrunner.data.stream_handle import StreamData
from sparkrunner.ml import features, keras_models
from sparkrunner.ml.ranks.training import validation_batch_size
from sparkrunner.ml.spec import KerasSpec, TrainResult
from sparkrunner.ranks.api import log_to_driver, rank_context
from sparkrunner.ranks.checkpoints import load_checkpoint, save_checkpoint
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
        start, history = _resume(model)
    columns = [*spec.feature_cols, *spec.label_cols, *filter(None, [spec.sample_weight_col])]
    train_loader = NumpyLoader(
        train_data, spec.batch_size, columns=columns, shuffle=spec.shuffle, seed=spec.seed
    )
    val_loader = None
    if val_data is not None:
        size = validation_batch_size(val_data.num_rows, world, spec.batch_size)
        val_loader = NumpyLoader(val_data, size, columns=columns, shuffle=False)
    model.fit(
        _input(keras, spec, train_loader, world, start),
        epochs=spec.epochs,
        initial_epoch=start,
        steps_per_epoch=len(train_loader),
        validation_data=None if val_loader is None else _input(keras, spec, val_loader, world, start),
        validation_steps=None if val_loader is None else len(val_loader),
        verbose=0,
        callbacks=[_epoch_recorder(keras, history), *([keras_callback()] if spec.verbose else [])],
    )
    if rank_context().rank != 0:
        return None
    return TrainResult(keras_models.packed(model), history, int(model.output_shape[-1]))


def _resume(model: Any) -> tuple[int, dict[str, list[float]]]:
    """The epoch to start at and the history so far: weights and optimizer state from the run's latest
    checkpoint, after a failure (called in the strategy's scope, where the optimizer's variables are made)."""
    if not os.environ.get(Env.CHECKPOINT_DIR):
        return 0, {}
    state = load_checkpoint()
    if state is None:
        return 0, {}
    model.set_weights(state["weights"])
    model.optimizer.build(model.trainable_variables)
    for variable, value in zip(_optimizer_variables(model), state["optimizer"], strict=True):
        variable.assign(value)
    log_to_driver(f"resuming from the checkpoint of epoch {state['epoch'] + 1}")
    return state["epoch"] + 1, state["history"]


def _optimizer_variables(model: Any) -> list[Any]:
    """The optimizer's step count and slots (a property in Keras 3 and tf_keras' optimizers, a method before)."""
    variables = model.optimizer.variables
    return list(variables() if callable(variables) else variables)


def _epoch_recorder(keras: Any, history: dict[str, list[float]]) -> Any:
    """A callback that appends each epoch's metrics to `history` and, when the run has a checkpoint folder,
    checkpoints the weights, the optimizer's state and the history (rank 0 writes)."""

    class EpochRecorder(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            for name, value in (logs or {}).items():
                history.setdefault(name, []).append(float(value))
            if os.environ.get(Env.CHECKPOINT_DIR):
                optimizer = [variable.numpy() for variable in _optimizer_variables(self.model)]
                state = {"weights": self.model.get_weights(), "optimizer": optimizer, "epoch": epoch}
                save_checkpoint({**state, "history": history}, step=epoch)

    return EpochRecorder()


def _input(keras: Any, spec: KerasSpec, loader: NumpyLoader, world: int, start: int) -> Any:
    """The rank's batches for ``fit``: under several workers a `DatasetCreator`, so that each worker's batches
    stay its own (a plain dataset would be re-batched across the workers)."""
    if world == 1:
        return _dataset(spec, loader, start)
    return keras.utils.experimental.DatasetCreator(lambda context: _dataset(spec, loader, start))


def _dataset(spec: KerasSpec, loader: NumpyLoader, start: int) -> Any:
    """``(features, labels[, weights])`` batches, every epoch's in turn from epoch `start` (each epoch's shuffle
    as an uninterrupted fit's), as a repeating ``tf.data`` dataset."""
    import tensorflow as tf

    def batches() -> Iterator[tuple[Any, ...]]:
        epoch = start
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
