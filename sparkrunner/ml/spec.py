"""What the driver sends the ranks to train, and what rank 0 sends back: plain picklable data."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkrunner.ml import requirements
from sparkrunner.ml.best_model import BestOf


@dataclass(frozen=True, kw_only=True)
class FitSettings:
    """What every estimator's ranks need to know of a `fit`, whatever trains: the columns and the loop's settings
    (built once on the driver from the stage's Params, `fit_stage.fit_settings`)."""

    feature_cols: tuple[str, ...]
    label_cols: tuple[str, ...]
    sample_weight_col: str | None = None
    batch_size: int = 32
    epochs: int = 1
    seed: int = 0
    shuffle: bool = True
    verbose: int = 1
    label_shapes: tuple[tuple[int, ...], ...] | None = None
    """Each label column's row shape (Horovod's `label_shapes`); None: the labels side by side as one matrix."""
    inmemory_cache_all: bool = False
    """Each rank keeps its shard in memory after the first epoch and serves later epochs from there."""
    val_batch_size: int | None = None
    """Rows per validation batch on each rank (Horovod's); None: chosen to leave out as few rows as can be."""
    train_steps_per_epoch: int | None = None
    """Training batches per epoch on each rank, at most one pass's (Horovod's); None: one pass."""
    validation_steps_per_epoch: int | None = None
    """Validation batches per epoch on each rank, at most one pass's (Horovod's); None: one pass."""

    @property
    def columns(self) -> list[str]:
        """The columns the ranks read, each once: features, labels, then the sample weights (the one place this
        is decided: the driver's split and every rank's loader use it)."""
        weight = [self.sample_weight_col] if self.sample_weight_col else []
        return list(dict.fromkeys([*self.feature_cols, *self.label_cols, *weight]))


@dataclass(frozen=True, kw_only=True)
class TrainSpec(FitSettings):
    """One torch `fit` (`TorchEstimator`, `LightningEstimator`): the pickled model and the loop's settings."""

    payload: bytes
    """cloudpickle of ``(model, optimizer, loss, metric functions)``, or Lightning's ``(module, callbacks, trainer_args)``:
    pickled once on the driver, where a failure is clear."""
    probability: str | None
    """"softmax", "exp" or "sigmoid" for a classifier (see `losses.probability_kind`), None for a regressor."""
    backward_passes_per_step: int = 1
    """Batches whose gradients add up before each optimizer step (`TorchEstimator` only)."""
    use_gpu: bool = True
    """False: train on the CPU even where a GPU is assigned (`TorchEstimator` only)."""
    gradient_compression: str | None = None
    """"fp16": DDP's fp16 compression hook averages the gradients in half precision (`TorchEstimator` only)."""
    input_shapes: tuple[tuple[int, ...], ...] | None = None
    """Each feature column's row shape: ``forward`` gets one tensor per column, ``(rows, *shape)``; None: one
    float32 matrix of the columns side by side."""


@dataclass(frozen=True)
class TrainResult:
    """Rank 0's answer: the trained model (cloudpickle, on the CPU), the metrics of every epoch, the width of
    the model's output (what the scoring columns hold), and the versions of the packages the model loads with,
    as installed where the result is made (rank 0): the logged model's requirements (`requirements`)."""

    model: bytes
    history: dict[str, list[float]] = field(default_factory=dict)
    output_size: int = 1
    versions: dict[str, str] = field(default_factory=requirements.installed_versions)


@dataclass(frozen=True, kw_only=True)
class KerasSpec(FitSettings):
    """One Keras `fit`: the model (`keras_models.packed`), its compile arguments and the loop's settings."""

    package: str
    """The model's Keras: ``tf_keras`` (trains under MultiWorkerMirroredStrategy) or Keras 3's ``keras``."""
    model: bytes
    compiled: bytes
    """cloudpickle of ``(optimizer config, loss, metrics)``: the model is compiled again in each rank."""
    callbacks: bytes | None = None
    """cloudpickle of the user's Keras callbacks (every rank runs them; writers only rank 0)."""
    custom_objects: bytes | None = None
    """cloudpickle of the user's ``custom_objects`` (in scope while the ranks compile; packed with the result)."""
    best_of: BestOf | None = None
    """The epoch whose weights rank 0 returns (`checkpoint_callback`); None: the last epoch's."""
