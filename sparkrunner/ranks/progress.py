"""Training progress, rank side: `report_progress`, `TorchProgress` and the Keras callback send one message per step.

The driver's half (the live bar, per-rank step timings) is `sparkrunner.observe.progress`. A cheap stand-in for Horovod Timeline: one small message per step, timed with the rank's own clock, so the
driver can tell each rank's throughput and which rank holds the others back.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sized
from typing import Any

from sparkrunner.channel.messages import Progress
from sparkrunner.ranks import anatomy
from sparkrunner.ranks.api import send_to_driver

_reported: dict[str, int] = {}
"""In this run: "step", the last step reported; "calls", how many reports were made."""


def forget_steps() -> None:
    """Between two runs of a warm rank: the next run's first `report_progress()` is step 1 again."""
    _reported.clear()


def reports_made() -> int:
    """How many times `report_progress` was called in this run (a built-in callback yields to the user's)."""
    return _reported.get("calls", 0)


def report_progress(
    step: int | None = None,
    *,
    epoch: int | None = None,
    total: int | None = None,
    samples: int | None = None,
    **metrics: Any,
) -> bool:
    """Tell the driver this rank finished a training step (call it on every rank, after every step).

    Args:
        step: the step just finished; defaults to the previous step + 1 (the first is 1).
        epoch: the current epoch, shown on the bar.
        total: the total number of steps of the run, for the bar's length and time estimate.
        samples: samples in this step, for samples per second per rank.
        metrics: numbers to show (e.g. ``loss=0.3``); scalar tensors and numpy values are fine.

    Returns False outside a run (nothing is sent), so `main` can be tested on its own.
    """
    step = _reported.get("step", 0) + 1 if step is None else int(step)
    _reported["step"] = step
    _reported["calls"] = reports_made() + 1
    numbers = {str(k): float(v) for k, v in metrics.items()}
    epoch, total, samples = (None if n is None else int(n) for n in (epoch, total, samples))
    clock = anatomy.clock()
    if clock is not None:
        clock.report()
    return send_to_driver(Progress(step, epoch, total, samples, time.monotonic(), numbers))


def keras_callback(log_every: int = 1, keras: Any = None) -> Any:
    """A `tf.keras` callback (of the `keras` module given, e.g. Keras 3's ``keras``) that reports every
    `log_every`-th training batch with Keras' logs as metrics."""
    if keras is None:
        import tensorflow as tf

        keras = tf.keras

    class SparkRunnerProgress(keras.callbacks.Callback):
        """Reports training batches to the sparkrunner driver."""

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            self._epoch = 0
            self._step = 0
            self._summed_over = replicas_summed(self.model)
            steps, epochs = self.params.get("steps"), self.params.get("epochs")
            self._total = steps * epochs if steps and epochs else None

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._epoch = epoch

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            self._step += 1
            if self._step % log_every == 0 or self._step == self._total:
                numbers: dict[str, Any] = {
                    k: float(v) / self._summed_over for k, v in (logs or {}).items() if _is_number(v)
                }
                report_progress(self._step, epoch=self._epoch, total=self._total, **numbers)

    return SparkRunnerProgress()


def replicas_summed(model: Any) -> int:
    """How many replicas' values each number of `model`'s per-batch logs sums: tf_keras under a tf.distribute
    strategy reduces them with "auto" = "sum" off TPUs (`reduce_per_replica`), so Keras' within-epoch values
    are N times the running mean over N replicas, while its epoch-end logs are the mean; Keras 3's are not summed."""
    if not any(kind.__module__.startswith("tf_keras") for kind in type(model).__mro__):
        return 1
    method, strategy = getattr(model, "distribute_reduction_method", "first"), model.distribute_strategy
    if method == "sum" or (method == "auto" and "TPU" not in type(strategy).__name__):
        return int(strategy.num_replicas_in_sync)
    return 1


class TorchProgress:
    """Reports one step per batch of a torch DataLoader (or any sized iterable of batches).

    ``progress = TorchProgress(loader, epochs=3)``, then ``for x, y in progress.epoch(e):`` ... and
    ``progress.log(loss=loss)``; each step is reported when the loop asks for the next batch.
    """

    def __init__(self, loader: Iterable[Any], epochs: int = 1) -> None:
        self._loader = loader
        self._total = len(loader) * epochs if isinstance(loader, Sized) else None
        self._step = 0
        self._metrics: dict[str, Any] = {}

    def log(self, **metrics: Any) -> None:
        """Metrics of the current step (tensors are converted with `.item()` when the step is reported)."""
        self._metrics.update(metrics)

    def epoch(self, epoch: int) -> Iterator[Any]:
        """Yield the loader's batches; report each finished step with its batch size."""
        for batch in self._loader:
            yield batch
            self._step += 1
            numbers = {k: _item(v) for k, v in self._metrics.items()}
            self._metrics.clear()
            report_progress(self._step, epoch=epoch, total=self._total, samples=_batch_size(batch), **numbers)


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _item(value: Any) -> float:
    return float(value.item()) if hasattr(value, "item") else float(value)


def _batch_size(batch: Any) -> int | None:
    first = batch[0] if isinstance(batch, (list, tuple)) and batch else batch
    shape = getattr(first, "shape", None)
    if shape:
        return int(shape[0])
    return len(first) if hasattr(first, "__len__") else None
