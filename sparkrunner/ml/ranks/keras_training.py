"""The training loop of `KerasEstimator`, in every rank: the model compiled again under TensorFlow's
MultiWorkerMirroredStrategy (one worker per rank, `TF_CONFIG` set by sparkrunner), each rank's batches from
its own shard with equal steps on every rank, Keras' ``fit`` doing the rest, and a checkpoint per epoch (weights,
optimizer state, history) when the run has a folder for them, from which a retried attempt resumes.

tf.data reads ahead of the steps and Keras makes a new validation iterator every epoch, so no pass over the rows
may start on what tf.data asks for in advance: on a stream every rank must open the same passes, or a rank waits
for a pass its peers never open (a hang in the collectives). So a training epoch starts reading only once the
previous epoch ended (validation included), after the last epoch nothing more is read, and the validation share
is read once and then served from memory."""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Iterator
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
    ended = EpochsEnded(start)
    try:
        model.fit(
            **_inputs(keras, spec, world, train_data, val_data, start, ended),
            epochs=spec.epochs,
            initial_epoch=start,
            verbose=0,
            callbacks=[_epoch_recorder(keras, history, ended), *([keras_callback()] if spec.verbose else [])],
        )
    finally:
        ended.close()
    if rank_context().rank != 0:
        return None
    return TrainResult(keras_models.packed(model), history, int(model.output_shape[-1]))


def _inputs(
    keras: Any,
    spec: KerasSpec,
    world: int,
    train_data: Data,
    val_data: Data | None,
    start: int,
    ended: EpochsEnded,
) -> dict[str, Any]:
    """``fit``'s data arguments: the rank's training batches and, with a validation split, its validation
    batches, with their steps per epoch (equal on every rank)."""
    columns = spec.columns
    train = NumpyLoader(train_data, spec.batch_size, columns=columns, shuffle=spec.shuffle, seed=spec.seed)
    inputs = {
        "x": _input(keras, world, _training_dataset(spec, train, start, ended)),
        "steps_per_epoch": len(train),
    }
    if val_data is None:
        return inputs
    size = validation_batch_size(val_data.num_rows, world, spec.batch_size)
    val = NumpyLoader(val_data, size, columns=columns, shuffle=False)
    validation = _input(keras, world, _validation_dataset(spec, val))
    return {**inputs, "validation_data": validation, "validation_steps": len(val)}


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


class EpochsEnded:
    """The epochs Keras has ended (validation included), for the training reader to wait on: it starts an
    epoch's pass only once the epoch before has ended, whatever tf.data asked for ahead of the steps."""

    def __init__(self, start: int) -> None:
        self._ended = start
        self._closed = False
        self._changed = threading.Condition()

    def end(self, epoch: int) -> None:
        with self._changed:
            self._ended = epoch + 1
            self._changed.notify_all()

    def close(self) -> None:
        """The fit is over (or failed): a reader still waiting reads nothing more."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_for(self, epoch: int) -> bool:
        """Whether `epoch` may be read: True once the epoch before it ended, False once the fit is over."""
        with self._changed:
            self._changed.wait_for(lambda: self._ended >= epoch or self._closed)
            return not self._closed


def _epoch_recorder(keras: Any, history: dict[str, list[float]], ended: EpochsEnded) -> Any:
    """A callback that appends each epoch's metrics to `history` and, when the run has a checkpoint folder,
    checkpoints the weights, the optimizer's state and the history (rank 0 writes); then lets the next epoch's
    rows be read."""

    class EpochRecorder(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            for name, value in (logs or {}).items():
                history.setdefault(name, []).append(float(value))
            if os.environ.get(Env.CHECKPOINT_DIR):
                optimizer = [variable.numpy() for variable in _optimizer_variables(self.model)]
                state = {"weights": self.model.get_weights(), "optimizer": optimizer, "epoch": epoch}
                save_checkpoint({**state, "history": history}, step=epoch)
            ended.end(epoch)

    return EpochRecorder()


def _input(keras: Any, world: int, dataset: Any) -> Any:
    """The rank's batches for ``fit``: under several workers a `DatasetCreator`, so that each worker's batches
    stay its own (a plain dataset would be re-batched across the workers)."""
    if world == 1:
        return dataset
    return keras.utils.experimental.DatasetCreator(lambda context: dataset)


Batch = tuple[Any, ...]


def _training_dataset(spec: KerasSpec, loader: NumpyLoader, start: int, ended: EpochsEnded) -> Any:
    """The batches of epochs `start` to the last, each with its epoch's shuffle (as an uninterrupted fit's),
    each epoch read once the one before it ended, and nothing read after the last."""

    def batches() -> Iterator[Batch]:
        for epoch in range(start, spec.epochs):
            if not ended.wait_for(epoch):
                return
            loader.set_epoch(epoch)
            yield from (_batch(spec, chunk) for chunk in loader.untimed())

    return _dataset(spec, loader, batches)


def _validation_dataset(spec: KerasSpec, loader: NumpyLoader) -> Any:
    """The rank's validation batches, again and again: its whole share read on the first request (one pass,
    on every rank alike), then served from memory to every iterator Keras makes."""
    held: list[Batch] = []
    reading = threading.Lock()

    def batches() -> Iterator[Batch]:
        with reading:
            if not held:
                held.extend(_batch(spec, chunk) for chunk in loader.untimed())
        while True:
            yield from held

    return _dataset(spec, loader, batches)


def _batch(spec: KerasSpec, chunk: dict[str, np.ndarray]) -> Batch:
    """``(features, labels[, weights])`` of one loader batch, as float32 matrices."""
    x = features.matrix([chunk[c] for c in spec.feature_cols])
    y = features.matrix([chunk[c] for c in spec.label_cols])
    weights = [] if spec.sample_weight_col is None else [chunk[spec.sample_weight_col].astype("float32")]
    return (x, y, *weights)


def _dataset(spec: KerasSpec, loader: NumpyLoader, batches: Callable[[], Iterator[Batch]]) -> Any:
    """`batches` as a ``tf.data`` dataset of the batches' shapes, never sharded again by TensorFlow."""
    import tensorflow as tf

    widths = {column.name: int(np.prod(column.shape)) for column in loader.data.columns}
    x, y = (
        tf.TensorSpec((None, sum(widths[c] for c in cols)), tf.float32)
        for cols in (spec.feature_cols, spec.label_cols)
    )
    signature = (x, y, *([tf.TensorSpec((None,), tf.float32)] if spec.sample_weight_col else []))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf.data.Dataset.from_generator(batches, output_signature=signature).with_options(options)
