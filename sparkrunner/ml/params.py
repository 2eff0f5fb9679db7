"""The stages' Spark ML `Params`: Horovod's names where Horovod has them (`num_proc`, `feature_cols`, ...),
sparkrunner's for the rest (`np`, `launcher`, `data`, ...), each with a ``getX``/``setX`` pair as Spark ML's own."""

from __future__ import annotations

from typing import Any, TypeVar

from pyspark.ml.param import Param, Params, TypeConverters

from sparkrunner.ml.losses import LOSS_NAMES

T = TypeVar("T", bound=type)


def _param(name: str, doc: str, converter: Any = TypeConverters.identity) -> Param[Any]:
    return Param(Params._dummy(), name, doc, typeConverter=converter)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def with_accessors(cls: T) -> T:
    """Add ``getFeatureCols()`` / ``setFeatureCols(value)`` (and so on) for every Param `cls` declares."""
    for name, value in list(vars(cls).items()):
        if isinstance(value, Param):
            setattr(cls, f"get{_camel(name)}", _getter(name))
            setattr(cls, f"set{_camel(name)}", _setter(name))
    return cls


def _getter(name: str) -> Any:
    def get(self: Params) -> Any:
        return self.getOrDefault(name)

    get.__doc__ = f"The value of `{name}`."
    return get


def _setter(name: str) -> Any:
    def set_(self: Params, value: Any) -> Any:
        return self._set(**{name: value})

    set_.__doc__ = f"Set `{name}`."
    return set_


@with_accessors
class ScoringParams(Params):
    """What scoring needs: the feature columns, the rows per forward pass, the output columns' names."""

    feature_cols = _param(
        "feature_cols", "feature columns: numbers, arrays, ML vectors", TypeConverters.toListString
    )
    batch_size = _param(
        "batch_size", "rows per batch (training: per rank; scoring: per forward pass)", TypeConverters.toInt
    )
    prediction_col = _param("prediction_col", "the output column of predictions", TypeConverters.toString)
    probability_col = _param(
        "probability_col", "a classifier's output column of class probabilities", TypeConverters.toString
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(batch_size=32, prediction_col="prediction", probability_col="probability")


@with_accessors
class TrainingParams(ScoringParams):
    """How `fit` trains: labels, epochs, validation, where the ranks run and how the rows reach them."""

    label_cols = _param(
        "label_cols", "label columns: numbers (class indices for classifiers)", TypeConverters.toListString
    )
    epochs = _param("epochs", "passes over the training rows", TypeConverters.toInt)
    validation = _param("validation", "a fraction of rows (0 < v < 1) or a boolean column that marks them")
    sample_weight_col = _param("sample_weight_col", "a numeric column of per-row loss weights")
    num_proc = _param("num_proc", "Horovod's name for np > 0: ranks in a Spark barrier stage")
    np = _param(
        "np",
        "ranks: > 0 in a Spark barrier stage, < 0 processes on the driver (default: num_proc, else the session's default parallelism)",
    )
    launcher = _param("launcher", "'direct' (default) or 'mpirun'", TypeConverters.toString)
    data = _param(
        "data",
        "'materialize' (Parquet, cached) or 'stream' (Spark tasks feed the ranks)",
        TypeConverters.toString,
    )
    store = _param(
        "store", "where materialized data goes (materialize's cache_dir): a path or URI every host reads"
    )
    checkpoint_dir = _param(
        "checkpoint_dir", "where each epoch's checkpoint goes (needed for max_failures on Spark)"
    )
    max_failures = _param(
        "max_failures", "failed attempts to retry from the latest epoch's checkpoint", TypeConverters.toInt
    )
    tracking = _param("tracking", "MLflow: None (on when installed), False, True, a URI or MlflowTracking")
    run_id = _param("run_id", "a name for this fit, kept on the model and as an MLflow tag")
    verbose = _param(
        "verbose",
        "0: quiet; 1: a line per epoch and the progress bar; 2: every rank's output",
        TypeConverters.toInt,
    )
    seed = _param("seed", "seed of the validation split, the shuffles and torch", TypeConverters.toInt)
    shuffle = _param("shuffle", "shuffle the training rows every epoch", TypeConverters.toBoolean)

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(
            epochs=1, validation=None, sample_weight_col=None, num_proc=None, np=None, launcher="direct",
            data="materialize", store=None, checkpoint_dir=None, max_failures=0, tracking=None, run_id=None,
            verbose=1, seed=0, shuffle=True,
        )  # fmt: skip


@with_accessors
class TorchParams(TrainingParams):
    """A torch model, its optimizer and its loss."""

    model = _param("model", "the torch.nn.Module to train")
    optimizer = _param(
        "optimizer", "a torch optimizer over model's parameters, or optimizer(params); default Adam(lr=1e-3)"
    )
    loss = _param("loss", "a torch loss, loss(outputs, labels) per row, or a name: " + ", ".join(LOSS_NAMES))

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(optimizer=None, loss="mse")
