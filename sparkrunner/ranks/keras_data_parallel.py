"""Keras 3 on sparkrunner's ranks, data-parallel: `model = sparkrunner.keras_data_parallel(model)` in each rank.

Keras 3's ``fit`` under TensorFlow's MultiWorkerMirroredStrategy is broken upstream (keras-team/keras#20585), so
Keras 3 trains here on its torch backend (``KERAS_BACKEND=torch``, where a Keras model is a ``torch.nn.Module``)
with torch.distributed underneath, as Horovod's ``DistributedOptimizer`` does it: every rank starts from rank 0's
weights, and each step's gradients are averaged over the ranks before the optimizer applies them, so N ranks
with batch B learn what one rank learns with batch N*B. See docs/tensorflow.md.

    def train():
        import keras                                  # Runner(env={"KERAS_BACKEND": "torch"})
        model = ...; model.compile(optimizer="adam", loss="mse")
        model = sparkrunner.keras_data_parallel(model)
        model.fit(x_shard, y_shard, callbacks=[sparkrunner.keras_metric_average()])
"""

from __future__ import annotations

from typing import Any

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.frameworks.tf_env import KERAS3_BACKEND as BACKEND


def keras_data_parallel(model: Any) -> Any:
    """`model` (a compiled Keras 3 model on the torch backend) made to train on every rank of this run: joins
    torch.distributed (gloo on the CPU, nccl on a GPU) if the function has not, copies rank 0's weights to every
    rank, and averages each step's gradients over the ranks. Returns the same model."""
    import keras
    import torch
    import torch.distributed as dist

    if not _is_keras3_model(keras, model):
        raise InvalidArgumentError(
            f"sparkrunner.keras_data_parallel takes a Keras 3 model on the torch backend, not a "
            f"{type(model).__module__}.{type(model).__qualname__}: build it with Keras 3 (`import keras`, or "
            "`tf.keras` where TF_USE_LEGACY_KERAS is unset or 0: sparkrunner leaves it unset when KERAS_BACKEND is "
            "set). A tf_keras model trains under tf.distribute.MultiWorkerMirroredStrategy instead "
            "(docs/tensorflow.md)"
        )
    if keras.backend.backend() != BACKEND:
        raise InvalidArgumentError(
            f"sparkrunner.keras_data_parallel needs Keras 3's torch backend, not {keras.backend.backend()!r}: "
            "set KERAS_BACKEND=torch in the ranks (Runner(env={'KERAS_BACKEND': 'torch'})) before keras is imported"
        )
    if model.optimizer is None:
        raise InvalidArgumentError(
            "compile the model before keras_data_parallel(model): its optimizer is wrapped"
        )
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    broadcast_weights(model)
    _average_gradients(model.optimizer)
    return model


def _is_keras3_model(keras: Any, model: Any) -> bool:
    """A model of this process's Keras 3 (`keras` is Keras 3: a tf_keras or Keras 2 model is not one of its)."""
    return int(keras.__version__.split(".")[0]) >= 3 and isinstance(model, keras.Model)


def broadcast_weights(model: Any, root: int = 0) -> None:
    """Every rank's weights (trainable or not) set to rank `root`'s."""
    import torch.distributed as dist

    if dist.get_world_size() == 1:
        return
    for variable in model.weights:
        dist.broadcast(variable.value.data, root)


def _average_gradients(optimizer: Any) -> None:
    """`optimizer`'s ``apply`` first averages the gradients over the ranks (one all-reduce per step, over one
    flat buffer), as Horovod's ``DistributedOptimizer`` wraps the optimizer's class."""
    import torch
    import torch.distributed as dist

    base = type(optimizer)
    if getattr(base, "_sparkrunner_averaged", False):
        return
    world = dist.get_world_size()

    def apply(self: Any, grads: list[Any], trainable_variables: Any = None) -> Any:
        if world > 1:
            present = [g for g in grads if g is not None]
            flat = torch.cat([g.reshape(-1) for g in present])
            dist.all_reduce(flat)
            flat /= world
            for grad, part in zip(present, flat.split([g.numel() for g in present]), strict=True):
                grad.copy_(part.view_as(grad))
        return base.apply(self, grads, trainable_variables)

    # named as its base, so that the model's saved compile config names Keras' own optimizer class
    names = {"__module__": base.__module__, "__qualname__": base.__qualname__}
    optimizer.__class__ = type(
        base.__name__, (base,), {"apply": apply, "_sparkrunner_averaged": True, **names}
    )


def keras_metric_average() -> Any:
    """A callback that replaces each epoch's metrics (``loss``, ``val_loss``, ...) by their mean over the ranks,
    as Horovod's ``MetricAverageCallback``: without it every rank reports its own shard's."""
    import keras
    import torch
    import torch.distributed as dist

    class MetricAverage(keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if logs is None or not dist.is_initialized() or dist.get_world_size() == 1:
                return
            names = sorted(logs)
            values = torch.tensor([float(logs[n]) for n in names], dtype=torch.float64)
            dist.all_reduce(values)
            logs.update(zip(names, (values / dist.get_world_size()).tolist(), strict=True))

    return MetricAverage()
