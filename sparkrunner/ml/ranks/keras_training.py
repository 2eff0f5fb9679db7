"""The training loop of `KerasEstimator`, in every rank: the model compiled again in each rank, each rank's
batches from its own shard with equal steps on every rank, Keras' ``fit`` doing the rest, and a checkpoint per
epoch (weights, optimizer state, history) when the run has a folder for them, from which a retried attempt resumes.

A ``tf_keras`` model trains under TensorFlow's MultiWorkerMirroredStrategy (one worker per rank, `TF_CONFIG` set by
sparkrunner). A Keras 3 model trains on Keras' torch backend, its gradients averaged over torch.distributed
(`sparkrunner.keras_data_parallel`): Keras 3's ``fit`` under MultiWorkerMirroredStrategy is broken upstream.

tf.data reads ahead of the steps and Keras makes a new validation iterator every epoch, so no pass over the rows
may start on what tf.data asks for in advance: on a stream every rank must open the same passes, or a rank waits
for a pass its peers never open (a hang in the collectives). So a training epoch starts reading only once the
previous epoch ended (validation included), after the last epoch nothing more is read, and the validation share
is read once and then served from memory. Keras 3 reads its batches step by step (`keras3_data`), to the same
effect."""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle
import numpy as np

from sparkrunner.common.environment import Env
from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.ranks.loader import NumpyLoader
from sparkrunner.data.ranks.memory_epochs import MemoryEpochs
from sparkrunner.data.stream_handle import StreamData
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import features, keras_models
from sparkrunner.ml.best_model import BestOf
from sparkrunner.ml.ranks.training import validation_batch_size
from sparkrunner.ml.spec import KerasSpec, TrainResult
from sparkrunner.ranks import keras_data_parallel as keras3
from sparkrunner.ranks.api import log_to_driver, rank_context
from sparkrunner.ranks.checkpoints import load_checkpoint, save_checkpoint
from sparkrunner.ranks.progress import keras_callback

Data = ParquetData | StreamData

_WRITERS = ("TensorBoard", "ModelCheckpoint", "CSVLogger")
"""Callbacks that write files: rank 0 runs them, the other ranks leave them out (as Horovod's docs advise)."""


def train(spec: KerasSpec, train_data: Data, val_data: Data | None) -> TrainResult | None:
    """Fit `spec`'s model on this rank's shard of `train_data`; rank 0 returns the model and its history."""
    keras = _keras(spec.package)
    world = rank_context().world_size
    scope = _scope(spec.package, world)  # the strategy first, before any other TensorFlow call (as before)
    keras.utils.set_random_seed(spec.seed)
    custom = cloudpickle.loads(spec.custom_objects) if spec.custom_objects else {}
    with scope, keras.utils.custom_object_scope(custom):
        model = cloudpickle.loads(spec.model)
        optimizer, loss, metrics = cloudpickle.loads(spec.compiled)
        model.compile(optimizer=keras.optimizers.get(optimizer), loss=loss, metrics=metrics or None)
        start, history = _resume(model)
    if spec.package == "keras":
        keras3.keras_data_parallel(model)
    ended = EpochsEnded(start)
    best = _best_keeper(keras, spec.best_of)
    try:
        model.fit(
            **_inputs(
                keras, spec, world, train_data, val_data, start, ended, keras_models.input_shapes(model)
            ),
            epochs=spec.epochs,
            initial_epoch=start,
            verbose=0,
            shuffle=False,  # each epoch's rows come shuffled by the loader
            callbacks=_callbacks(keras, spec, history, ended, best),
        )
        # every rank reads them: under MultiWorkerMirroredStrategy reading a SyncOnRead variable (BatchNorm's
        # moving statistics) is a collective, which a rank that returned early would leave rank 0 waiting on
        weights = best.weights if best is not None and best.weights is not None else model.get_weights()
    finally:
        ended.close()
        _leave(spec.package)
    if rank_context().rank != 0:
        return None
    return TrainResult(keras_models.packed(model, custom, weights), history, int(model.output_shape[-1]))


def _keras(package: str) -> Any:
    """The model's Keras module; Keras 3 on its torch backend (set before Keras is imported)."""
    if package == "keras":
        imported = sys.modules.get("keras")
        if imported is not None and imported.backend.backend() != keras3.BACKEND:
            raise InvalidArgumentError(
                f"Keras 3 was imported in this rank with the {imported.backend.backend()!r} backend before the "
                f"fit; sparkrunner trains Keras 3 on the {keras3.BACKEND!r} backend (KERAS_BACKEND)"
            )
        os.environ["KERAS_BACKEND"] = keras3.BACKEND
    return importlib.import_module(package)


def _scope(package: str, world: int) -> Any:
    """Where the model is built and compiled: MultiWorkerMirroredStrategy's scope for tf_keras on several ranks."""
    if package != "tf_keras" or world == 1:
        return contextlib.nullcontext()
    import tensorflow as tf

    return tf.distribute.MultiWorkerMirroredStrategy().scope()


def _leave(package: str) -> None:
    """Keras 3's process group ends with the fit (the next fit in a warm rank joins a new one)."""
    if package == "keras":
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _callbacks(
    keras: Any, spec: KerasSpec, history: dict[str, list[float]], ended: EpochsEnded, best: Any
) -> list[Any]:
    """Keras 3's metrics averaged over the ranks first, the user's callbacks, then sparkrunner's own."""
    averaged = [keras3.keras_metric_average()] if spec.package == "keras" else []
    progress = [keras_callback(keras=keras)] if spec.verbose else []
    kept = [best] if best is not None else []
    return [*averaged, *_users(keras, spec), *kept, _epoch_recorder(keras, history, ended), *progress]


def _best_keeper(keras: Any, best_of: BestOf | None) -> Any:
    """A callback holding the weights of the best epoch so far by `best_of` (`checkpoint_callback`), on every
    rank alike (the metrics it compares are the ranks' averages), or None to return the last epoch's."""
    if best_of is None:
        return None
    choice = best_of

    class BestWeights(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.best: float | None = None
            self.weights: list[np.ndarray] | None = None

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            logs = logs or {}
            if choice.monitor not in logs:
                raise InvalidArgumentError(
                    f"checkpoint_callback monitors {choice.monitor!r}, which the epochs do not report (they "
                    f"report {sorted(logs)}): give one of those as its monitor"
                )
            value = float(logs[choice.monitor])
            if choice.improves(value, self.best):
                self.best, self.weights = value, self.model.get_weights()

    return BestWeights()


def _users(keras: Any, spec: KerasSpec) -> list[Any]:
    """The user's callbacks for this rank: all of them on rank 0, all but the writers elsewhere."""
    if spec.callbacks is None:
        return []
    chosen = []
    for callback in cloudpickle.loads(spec.callbacks):
        names = {cls.__name__ for cls in type(callback).__mro__}
        if rank_context().rank != 0 and names & set(_WRITERS):
            continue
        if "TensorBoard" in names:
            _without_profiler(keras, callback)
        chosen.append(callback)
    return chosen


def _without_profiler(keras: Any, board: Any) -> None:
    """Keras 3 profiles on the TensorFlow and JAX backends only: on the torch backend a TensorBoard callback's
    ``profile_batch`` is turned off (with a line to the driver), as Keras itself refuses it there."""
    if getattr(board, "_start_batch", 0) and keras.__name__ == "keras" and keras.backend.backend() == "torch":
        log_to_driver(
            "TensorBoard(profile_batch=...): Keras 3 cannot profile on the torch backend; not profiled"
        )
        board._init_profile_batch(0)


def _inputs(
    keras: Any,
    spec: KerasSpec,
    world: int,
    train_data: Data,
    val_data: Data | None,
    start: int,
    ended: EpochsEnded,
    shapes: list[keras_models.Shape] | None,
) -> dict[str, Any]:
    """``fit``'s data arguments: the rank's training batches and, with a validation split, its validation
    batches, with their steps per epoch (equal on every rank); features fed in the model's input `shapes`."""
    columns = spec.columns
    train = NumpyLoader(
        train_data, spec.batch_size, columns=columns, shuffle=spec.shuffle, seed=spec.seed,
        max_steps=spec.train_steps_per_epoch,
    )  # fmt: skip
    batches = Batches(spec, shapes, train)
    inputs = {
        "x": _input(spec, world, _training_dataset(spec, batches, start, ended)),
        "steps_per_epoch": len(train),
    }
    if val_data is None:
        return inputs
    size = validation_batch_size(val_data.num_rows, world, spec.batch_size, spec.val_batch_size)
    val = NumpyLoader(
        val_data, size, columns=columns, shuffle=False, max_steps=spec.validation_steps_per_epoch
    )
    validation = _input(spec, world, _validation_dataset(spec, Batches(spec, shapes, val)))
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
                save_checkpoint({**state, "history": history}, step=epoch, background=True)
            ended.end(epoch)

    return EpochRecorder()


def _input(spec: KerasSpec, world: int, dataset: Any) -> Any:
    """The rank's batches for ``fit``: under several tf_keras workers a `DatasetCreator`, so that each worker's
    batches stay its own (a plain dataset would be re-batched across the workers)."""
    if world == 1 or spec.package != "tf_keras":
        return dataset
    keras = importlib.import_module(spec.package)
    return keras.utils.experimental.DatasetCreator(lambda context: dataset)


Batch = tuple[Any, ...]


class Batches:
    """A loader's chunks as ``(features, labels[, weights])``: features in the model's input shapes, labels in
    `label_shapes` (else one matrix), float32; and, for tf_keras, as a ``tf.data`` dataset."""

    def __init__(self, spec: KerasSpec, shapes: list[keras_models.Shape] | None, loader: NumpyLoader) -> None:
        self.spec, self.shapes, self.loader = spec, shapes, loader

    def of(self, chunk: dict[str, np.ndarray]) -> Batch:
        spec = self.spec
        x = keras_models.fed(self.shapes, features.matrix([chunk[c] for c in spec.feature_cols]))
        y = keras_models.fed(spec.label_shapes, features.matrix([chunk[c] for c in spec.label_cols]))
        weights = [] if spec.sample_weight_col is None else [chunk[spec.sample_weight_col].astype("float32")]
        return (x, y, *weights)

    def tf_dataset(self, batches: Callable[[], Iterator[Batch]]) -> Any:
        """`batches` as a ``tf.data`` dataset (tf_keras' input) never sharded again by TensorFlow."""
        import tensorflow as tf

        spec = self.spec
        widths = {column.name: int(np.prod(column.shape)) for column in self.loader.data.columns}

        def signature(shapes: Any, cols: tuple[str, ...]) -> Any:
            if not shapes:
                return tf.TensorSpec((None, sum(widths[c] for c in cols)), tf.float32)
            specs = tuple(tf.TensorSpec((None, *shape), tf.float32) for shape in shapes)
            return specs[0] if len(specs) == 1 else specs

        x, y = signature(self.shapes, spec.feature_cols), signature(spec.label_shapes, spec.label_cols)
        weights = [tf.TensorSpec((None,), tf.float32)] if spec.sample_weight_col else []
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        dataset = tf.data.Dataset.from_generator(batches, output_signature=(x, y, *weights))
        return dataset.with_options(options)


def _training_dataset(spec: KerasSpec, batches: Batches, start: int, ended: EpochsEnded) -> Any:
    """The batches of epochs `start` to the last, each with its epoch's shuffle (as an uninterrupted fit's),
    each epoch read once the one before it ended, and nothing read after the last; with `inmemory_cache_all`,
    epochs after the first served from memory."""
    loader = batches.loader
    kept = MemoryEpochs(spec.batch_size, spec.shuffle, spec.seed) if spec.inmemory_cache_all else None

    def chunks(epoch: int) -> Iterator[dict[str, np.ndarray]]:
        loader.set_epoch(epoch)
        return loader.untimed()

    def epoch_batches(epoch: int) -> Iterator[Batch]:
        read = kept.epoch(epoch, functools.partial(chunks, epoch)) if kept else chunks(epoch)
        return (batches.of(chunk) for chunk in read)

    if spec.package == "keras":
        from sparkrunner.ml.ranks.keras3_data import EpochBatches

        return EpochBatches(len(loader), start, epoch_batches)

    def generated() -> Iterator[Batch]:
        for epoch in range(start, spec.epochs):
            if not ended.wait_for(epoch):
                return
            yield from epoch_batches(epoch)

    return batches.tf_dataset(generated)


def _validation_dataset(spec: KerasSpec, batches: Batches) -> Any:
    """The rank's validation batches, again and again: its whole share read on the first request (one pass,
    on every rank alike), then served from memory to every iterator Keras makes."""

    def read() -> Iterator[Batch]:
        return (batches.of(chunk) for chunk in batches.loader.untimed())

    if spec.package == "keras":
        from sparkrunner.ml.ranks.keras3_data import HeldBatches

        return HeldBatches(len(batches.loader), read)
    held: list[Batch] = []
    reading = threading.Lock()

    def generated() -> Iterator[Batch]:
        with reading:
            if not held:
                held.extend(read())
        while True:
            yield from held

    return batches.tf_dataset(generated)
