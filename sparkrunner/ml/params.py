"""The stages' Spark ML `Params`: Horovod's names where Horovod has them (`num_proc`, `feature_cols`, ...),
sparkrunner's for the rest (`np`, `launcher`, `data`, ...), each with a ``getX``/``setX`` pair as Spark ML's own."""

from __future__ import annotations

from typing import Any, TypeVar

from pyspark.ml.param import Param, Params, TypeConverters

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml.losses import LOSS_NAMES

T = TypeVar("T", bound=type)


def param(name: str, doc: str, converter: Any = TypeConverters.identity) -> Param[Any]:
    """A stage's Param: a value `converter` refuses raises `InvalidArgumentError` naming the Param and its doc."""
    return Param(Params._dummy(), name, doc, typeConverter=_Converter(name, doc, converter))


class _Converter:
    """One of pyspark's `TypeConverters` whose refusal (a bare `TypeError`, which pyspark words without the
    stage) becomes sparkrunner's typed error; a class, not a closure, so Params pickle with plain `pickle`."""

    def __init__(self, name: str, doc: str, convert: Any) -> None:
        self.name, self.doc, self.convert = name, doc, convert

    def __call__(self, value: Any) -> Any:
        try:
            return self.convert(value)
        except TypeError as error:
            raise InvalidArgumentError(
                f"{self.name}={value!r} ({type(value).__name__}) is not a valid value: {str(error).rstrip('.')}. "
                f"{self.name}: {self.doc}"
            ) from None


def log_model_param(flavor: str) -> Param[Any]:
    """The `log_model` switch of an estimator whose fitted model MLflow logs in `flavor`."""
    return param(
        "log_model",
        f"log the fitted model to the fit's MLflow run ({flavor} flavor, with a signature)",
        TypeConverters.toBoolean,
    )


def probability_param() -> Param[Any]:
    """The `probability` rule of a stage whose model's loss does not say whether it is a classifier."""
    return param(
        "probability",
        "a classifier's outputs: 'softmax' (logits), 'exp' (log-probabilities), 'sigmoid' (one logit); "
        "None: a regressor",
    )


def input_shapes_param() -> Param[Any]:
    """Horovod's `input_shapes`: the shape each feature column reaches the model's ``forward`` in."""
    return param(
        "input_shapes",
        "one shape per feature column, led by -1 for the batch (e.g. [[-1, 1, 28, 28]]): forward gets one "
        "tensor per column in its shape; None: one float32 matrix of the columns side by side",
    )


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

    feature_cols = param(
        "feature_cols", "feature columns: numbers, arrays, ML vectors", TypeConverters.toListString
    )
    batch_size = param(
        "batch_size", "rows per batch (training: per rank; scoring: per forward pass)", TypeConverters.toInt
    )
    prediction_col = param("prediction_col", "the output column of predictions", TypeConverters.toString)
    probability_col = param(
        "probability_col", "a classifier's output column of class probabilities", TypeConverters.toString
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(batch_size=32, prediction_col="prediction", probability_col="probability")


@with_accessors
class TrainingParams(ScoringParams):
    """How `fit` trains: labels, epochs, validation, where the ranks run and how the rows reach them."""

    label_cols = param(
        "label_cols", "label columns: numbers (class indices for classifiers)", TypeConverters.toListString
    )
    epochs = param("epochs", "passes over the training rows", TypeConverters.toInt)
    validation = param("validation", "a fraction of rows (0 < v < 1) or a boolean column that marks them")
    sample_weight_col = param("sample_weight_col", "a numeric column of per-row loss weights")
    num_proc = param("num_proc", "Horovod's name for np > 0: ranks in a Spark barrier stage")
    np = param(
        "np",
        "ranks: > 0 in a Spark barrier stage, < 0 processes on the driver (default: num_proc, else the session's task slots)",
    )
    launcher = param("launcher", "'direct' (default) or 'mpirun'", TypeConverters.toString)
    data = param(
        "data",
        "'materialize' (Parquet, cached) or 'stream' (Spark tasks feed the ranks)",
        TypeConverters.toString,
    )
    store = param(
        "store", "where materialized data goes (materialize's cache_dir): a path or URI every host reads"
    )
    checkpoint_dir = param(
        "checkpoint_dir", "where each epoch's checkpoint goes (needed for max_failures on Spark)"
    )
    max_failures = param(
        "max_failures", "failed attempts to retry from the latest epoch's checkpoint", TypeConverters.toInt
    )
    timeout = param(
        "timeout",
        "seconds the ranks may train, every attempt together, before the fit fails with RunTimeoutError, which "
        "shows where each rank was (None: no bound)",
    )
    tracking = param("tracking", "MLflow: None (on when installed), False, True, a URI or MlflowTracking")
    run_id = param("run_id", "a name for this fit, kept on the model and as an MLflow tag")
    verbose = param(
        "verbose",
        "0: quiet; 1: a line per epoch and the progress bar; 2: every rank's output",
        TypeConverters.toInt,
    )
    seed = param("seed", "seed of the validation split, the shuffles and torch", TypeConverters.toInt)
    shuffle = param("shuffle", "shuffle the training rows every epoch", TypeConverters.toBoolean)

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(
            epochs=1, validation=None, sample_weight_col=None, num_proc=None, np=None, launcher="direct",
            data="materialize", store=None, checkpoint_dir=None, max_failures=0, timeout=None, tracking=None, run_id=None,
            verbose=1, seed=0, shuffle=True,
        )  # fmt: skip


@with_accessors
class LoopParams(TrainingParams):
    """Horovod's settings of the estimators' own training loops (torch, Lightning, Keras): the validation
    batches' size and the steps of an epoch."""

    val_batch_size = param(
        "val_batch_size",
        "rows per validation batch on each rank (None: the largest up to batch_size that leaves out at most "
        "1% of the validation rows)",
    )
    train_steps_per_epoch = param(
        "train_steps_per_epoch", "training batches per epoch on each rank, at most one pass (None: one pass)"
    )
    validation_steps_per_epoch = param(
        "validation_steps_per_epoch",
        "validation batches per epoch on each rank, at most one pass (None: one pass)",
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(val_batch_size=None, train_steps_per_epoch=None, validation_steps_per_epoch=None)


@with_accessors
class PytorchFlavorParams(LoopParams):
    """Training whose fitted model MLflow logs in its pytorch flavor (the torch and Lightning estimators)."""

    log_model = log_model_param("pytorch")
    input_shapes = input_shapes_param()
    label_shapes = param(
        "label_shapes", "one shape per label column, led by -1 for the batch: the labels the loss gets"
    )
    inmemory_cache_all = param(
        "inmemory_cache_all",
        "each rank keeps its shard in memory after the first epoch and reads no data after it",
        TypeConverters.toBoolean,
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(log_model=True, input_shapes=None, label_shapes=None, inmemory_cache_all=False)


@with_accessors
class TorchParams(PytorchFlavorParams):
    """A torch model, its optimizer and its loss."""

    model = param("model", "the torch.nn.Module to train")
    optimizer = param(
        "optimizer", "a torch optimizer over model's parameters, or optimizer(params); default Adam(lr=1e-3)"
    )
    loss = param("loss", "a torch loss, loss(outputs, labels) per row, or a name: " + ", ".join(LOSS_NAMES))
    backward_passes_per_step = param(
        "backward_passes_per_step",
        "batches whose gradients are summed before each optimizer step (gradient accumulation)",
        TypeConverters.toInt,
    )
    gradient_compression = param(
        "gradient_compression",
        "'fp16': the gradients are averaged over the ranks in half precision (DDP's fp16_compress_hook); None: "
        "in full precision",
    )
    use_gpu = param(
        "use_gpu",
        "train on the GPU Spark assigns each rank, where there is one (True); False: on the CPU",
        TypeConverters.toBoolean,
    )
    metrics = param(
        "metrics",
        "functions fn(outputs, labels) -> a number tensor, averaged over batches and ranks each epoch, in "
        "history under fn's name (val_<name> for validation)",
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(
            optimizer=None, loss="mse", backward_passes_per_step=1, gradient_compression=None, use_gpu=True,
            metrics=None,
        )  # fmt: skip


@with_accessors
class LightningParams(PytorchFlavorParams):
    """A LightningModule (its own optimizers and losses), the Trainer's callbacks and further arguments."""

    model = param("model", "the LightningModule to train (training_step gets {column: tensor} batches)")
    callbacks = param("callbacks", "Lightning callbacks for the Trainer of every rank")
    trainer_args = param(
        "trainer_args", "further keyword arguments of lightning's Trainer (e.g. gradient_clip_val)"
    )
    probability = probability_param()

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(callbacks=None, trainer_args=None, probability=None)


@with_accessors
class KerasParams(LoopParams):
    """A Keras model (``tf_keras`` or Keras 3), its optimizer, loss and metrics, compiled again in each rank."""

    model = param("model", "the Keras model to train (built: its inputs' shapes known)")
    optimizer = param("optimizer", "a Keras optimizer or its name; default 'adam'")
    loss = param("loss", "a Keras loss or its name, e.g. 'mse', 'sparse_categorical_crossentropy'")
    metrics = param("metrics", "Keras metrics (names or objects), reported per epoch in `history`")
    callbacks = param(
        "callbacks",
        "Keras callbacks run on every rank (TensorBoard, ModelCheckpoint, CSVLogger on rank 0 only)",
    )
    label_shapes = param(
        "label_shapes", "each label column's shape, e.g. [[10]] (None: the label columns side by side)"
    )
    inmemory_cache_all = param(
        "inmemory_cache_all",
        "each rank keeps its training rows in memory after the first epoch",
        TypeConverters.toBoolean,
    )
    custom_objects = param(
        "custom_objects",
        "the functions and classes the model names by name (a custom activation, layer, loss or metric), "
        "as Keras' custom_objects: used wherever the model is rebuilt (ranks, driver, MLflow, scoring)",
    )
    checkpoint_callback = param(
        "checkpoint_callback",
        "a ModelCheckpoint or BestModelCheckpoint (sparkrunner.compat.horovod_keras_callbacks): with "
        "save_best_only, the fitted model is the epoch's best by its `monitor` (else the last epoch's)",
    )
    log_model = log_model_param("keras/tensorflow")

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(
            optimizer="adam", loss="mse", metrics=None, callbacks=None, label_shapes=None, inmemory_cache_all=False,
            custom_objects=None, checkpoint_callback=None, log_model=True,
        )  # fmt: skip


@with_accessors
class FunctionParams(TrainingParams):
    """Your own training function and predict function."""

    train_fn = param("train_fn", "train_fn(train_data, val_data) on every rank; rank 0 returns the model")
    predict_fn = param(
        "predict_fn", "predict_fn(model, features) -> outputs (rows, output_size), in the executors"
    )
    output_size = param(
        "output_size", "outputs per row: 1 gives a double prediction, more an array", TypeConverters.toInt
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(predict_fn=None, output_size=1)
