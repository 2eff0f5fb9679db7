"""What the driver sends the ranks to train, and what rank 0 sends back: plain picklable data."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TrainSpec:
    """One `fit`: the pickled (model, optimizer, loss), the columns and the loop's settings."""

    payload: bytes
    """cloudpickle of ``(model, optimizer, loss)``, or Lightning's ``(module, callbacks, trainer_args)``:
    pickled once on the driver, where a failure is clear."""
    feature_cols: tuple[str, ...]
    label_cols: tuple[str, ...]
    sample_weight_col: str | None
    batch_size: int
    epochs: int
    probability: str | None
    """"softmax", "exp" or "sigmoid" for a classifier (see `losses.probability_kind`), None for a regressor."""
    seed: int = 0
    shuffle: bool = True
    verbose: int = 1
    callbacks: bytes | None = None
    """cloudpickle of the user's Keras callbacks (every rank runs them; writers only rank 0)."""
    label_shapes: tuple[tuple[int, ...], ...] | None = None
    """Each label column's shape (Horovod's `label_shapes`); None: the labels side by side as one matrix."""
    inmemory_cache_all: bool = False
    """Keep the rank's training rows in memory after the first epoch and serve later epochs from there."""
    backward_passes_per_step: int = 1
    """Batches whose gradients add up before each optimizer step (`TorchEstimator` only)."""


@dataclass(frozen=True)
class TrainResult:
    """Rank 0's answer: the trained model (cloudpickle, on the CPU), the metrics of every epoch, and the width
    of the model's output (what the scoring columns hold)."""

    model: bytes
    history: dict[str, list[float]] = field(default_factory=dict)
    output_size: int = 1


@dataclass(frozen=True)
class KerasSpec:
    """One Keras `fit`: the model (`keras_models.packed`), its compile arguments and the loop's settings."""

    package: str
    """The model's Keras: ``tf_keras`` (trains under MultiWorkerMirroredStrategy) or Keras 3's ``keras`` (trains
    on its torch backend, `sparkrunner.keras_data_parallel`)."""
    model: bytes
    compiled: bytes
    """cloudpickle of ``(optimizer config, loss, metrics)``: the model is compiled again in each rank."""
    feature_cols: tuple[str, ...]
    label_cols: tuple[str, ...]
    sample_weight_col: str | None
    batch_size: int
    epochs: int
    seed: int = 0
    shuffle: bool = True
    verbose: int = 1
    callbacks: bytes | None = None
    """cloudpickle of the user's Keras callbacks (every rank runs them; writers only rank 0)."""
    label_shapes: tuple[tuple[int, ...], ...] | None = None
    """Each label column's shape (Horovod's `label_shapes`); None: the labels side by side as one matrix."""
    inmemory_cache_all: bool = False
    """Keep the rank's training rows in memory after the first epoch and serve later epochs from there."""
