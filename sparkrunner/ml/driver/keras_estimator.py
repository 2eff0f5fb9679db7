"""`KerasEstimator` and `KerasModel`: a Keras model trained on sparkrunner's ranks as a Spark ML stage (``tf_keras``
under TensorFlow's MultiWorkerMirroredStrategy, Keras 3 on its torch backend over torch.distributed), and the
fitted model scoring on the executors."""

from __future__ import annotations

import math
import os
from typing import Any

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.util import MLReadable, MLWritable

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.frameworks.tf_env import KERAS3_BACKEND as BACKEND
from sparkrunner.ml import best_model, features, keras_models
from sparkrunner.ml.driver import checks, fit_stage, mlflow_logging
from sparkrunner.ml.driver.persistence import ModelState, SavedParams, StateReader, StateWriter
from sparkrunner.ml.driver.scoring import model_source, scored
from sparkrunner.ml.entry import RankEntry
from sparkrunner.ml.params import KerasParams, ScoringParams
from sparkrunner.ml.spec import KerasSpec, TrainResult
from sparkrunner.ml.workers.scoring import BatchScorer

_TRAIN = RankEntry("sparkrunner.ml.ranks.keras_training", "train")
_CLASSIFIER_LOSSES = ("sparse_categorical_crossentropy", "categorical_crossentropy")


class KerasEstimator(Estimator, KerasParams, SavedParams):
    """Trains a Keras model (``tf_keras``, or Keras 3 on its torch backend) on `np` ranks; `fit(df)` returns a
    `KerasModel`. The model receives the `feature_cols` side by side, reshaped to its input shapes (one block per
    input), and the `label_cols` as float32 labels (in `label_shapes` when given); a classifier (loss
    ``sparse_categorical_crossentropy`` or ``categorical_crossentropy`` with a softmax output) also gets a
    `probability` column. `callbacks` run on every rank, the file writers on rank 0 only. `custom_objects` go
    wherever the model is rebuilt; with a ``save_best_only`` `checkpoint_callback` the fitted model is the best
    epoch's by its monitored metric. See docs/ml.md."""

    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(
        self,
        *,
        model: Any = None,
        optimizer: Any = "adam",
        loss: Any = "mse",
        metrics: list[Any] | None = None,
        callbacks: list[Any] | None = None,
        label_shapes: list[list[int]] | None = None,
        inmemory_cache_all: bool = False,
        custom_objects: dict[str, Any] | None = None,
        checkpoint_callback: Any = None,
        val_batch_size: int | None = None,
        train_steps_per_epoch: int | None = None,
        validation_steps_per_epoch: int | None = None,
        feature_cols: list[str] | None = None,
        label_cols: list[str] | None = None,
        batch_size: int = 32,
        epochs: int = 1,
        validation: float | str | None = None,
        sample_weight_col: str | None = None,
        num_proc: int | None = None,
        np: int | None = None,
        launcher: str = "direct",
        data: str = "materialize",
        store: str | None = None,
        checkpoint_dir: str | None = None,
        max_failures: int = 0,
        timeout: float | None = None,
        tracking: Any = None,
        run_id: str | None = None,
        verbose: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        log_model: bool = True,
        prediction_col: str = "prediction",
        probability_col: str = "probability",
    ) -> None:
        super().__init__()
        self._set(**self._input_kwargs)

    @keyword_only
    def setParams(self, **params: Any) -> KerasEstimator:
        return self._set(**self._input_kwargs)

    def _fit(self, dataset: Any) -> KerasModel:
        fit_stage.check_input(self, dataset)
        spec = self._spec(dataset)
        shapes = keras_models.input_shapes(self.getOrDefault("model"))
        fitted = fit_stage.fit_on_ranks(
            self, dataset, spec, _TRAIN, spec, check_data=lambda data: _check_shapes(spec, shapes, data),
            env=_rank_keras(spec.package),
        )  # fmt: skip
        result: TrainResult = fitted.result
        get = self.getOrDefault
        model = KerasModel(
            feature_cols=get("feature_cols"), batch_size=get("batch_size"), prediction_col=get("prediction_col"),
            probability_col=get("probability_col"),
        )  # fmt: skip
        model.state = ModelState(
            result.model, result.output_size, _probability(get("loss")), result.history, fitted.mlflow_run_id,
            get("run_id"), self._logged(dataset, fitted, result),
        )  # fmt: skip
        return model

    def saved_values(self) -> dict[str, Any]:
        """A Keras optimizer as its config (it holds weak references, which do not pickle); `fit` takes either."""
        values = super().saved_values()
        optimizer, package = values.get("optimizer"), keras_models.package_of(values.get("model"))
        if package is not None and optimizer is not None and not isinstance(optimizer, (str, dict)):
            values["optimizer"] = _keras(package).optimizers.serialize(optimizer)
        return values

    def _spec(self, dataset: Any) -> KerasSpec:
        get = self.getOrDefault
        model = get("model")
        package = keras_models.package_of(model)
        if package is None:
            raise InvalidArgumentError(f"model must be a Keras model, not {type(model).__name__}")
        foreign = keras_models.foreign_layer(model, BACKEND) if package == "keras" else None
        if foreign is not None:
            raise InvalidArgumentError(
                f"{foreign}: sparkrunner trains Keras 3 models on Keras' {BACKEND} backend (Keras 3's fit under "
                "TensorFlow's MultiWorkerMirroredStrategy is broken upstream, keras-team/keras#20585). Replace "
                "the layer with Keras layers, or build the model with tf_keras"
            )
        optimizer = get("optimizer")
        if not isinstance(optimizer, (str, dict)):  # a dict: its serialized config (a saved estimator's)
            optimizer = _keras(package).optimizers.serialize(optimizer)
        compiled = checks.pickled("optimizer, loss or metrics", (optimizer, get("loss"), get("metrics")))
        custom = _custom_objects(get("custom_objects"))
        best = best_model.best_of(get("checkpoint_callback"))
        if best is not None and best.monitor.startswith("val_") and get("validation") is None:
            raise InvalidArgumentError(
                f"checkpoint_callback monitors {best.monitor!r}, a validation metric, but validation is not set: "
                f"give validation= (a fraction or a column), or monitor={best.monitor.removeprefix('val_')!r}"
            )
        return fit_stage.spec(
            self,
            KerasSpec,
            package=package,
            model=keras_models.packed(model, custom),
            compiled=compiled,
            custom_objects=checks.pickled("custom_objects", custom) if custom else None,
            best_of=best,
            callbacks=_callbacks(get("callbacks")),
            label_shapes=checks.row_shapes("label_shapes", get("label_shapes"), get("label_cols")),
            inmemory_cache_all=get("inmemory_cache_all"),
            **fit_stage.loop_fields(self),
        )

    def _logged(self, dataset: Any, fitted: fit_stage.Fitted, result: TrainResult) -> str | None:
        """The fitted model in the fit's MLflow run (Keras' flavor, signature from two rows' features)."""
        if fitted.tracking is None or not fitted.mlflow_run_id or not self.getOrDefault("log_model"):
            return None
        import cloudpickle

        names = self.getOrDefault("feature_cols")
        inputs = mlflow_logging.feature_schema(dataset, names)
        example = mlflow_logging.feature_example(dataset, names)
        model = cloudpickle.loads(result.model)
        custom = _custom_objects(self.getOrDefault("custom_objects"))
        return mlflow_logging.log_keras_model(
            fitted.tracking.uri, fitted.mlflow_run_id, model, inputs, example, result.versions, custom
        )


class KerasModel(Model, ScoringParams, MLWritable, MLReadable):
    """A fitted Keras model: `transform(df)` appends `prediction` (and `probability` for a classifier), computed
    on the executors, each Python worker loading the model once. ``history`` holds each epoch's metrics."""

    state: ModelState
    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(self, **params: Any) -> None:
        super().__init__()
        self._set(**self._input_kwargs)

    @property
    def history(self) -> dict[str, list[float]]:
        """Keras' per-epoch metrics: ``loss``, ``val_loss`` and those `metrics` named."""
        return self.state.history

    @property
    def mlflow_run_id(self) -> str | None:
        return self.state.mlflow_run_id

    @property
    def run_id(self) -> str | None:
        return self.state.run_id

    @property
    def mlflow_model_uri(self) -> str | None:
        return self.state.mlflow_model_uri

    def getModel(self) -> Any:
        """The trained Keras model."""
        import cloudpickle

        return cloudpickle.loads(self.state.payload)

    def _transform(self, dataset: Any) -> Any:
        state = self.state
        source = model_source(state.model_id, state.payload, dataset.sparkSession)
        scorer = BatchScorer(source, self.getOrDefault("batch_size"), state.probability, keras_models.predict)
        names = {
            "prediction": self.getOrDefault("prediction_col"),
            "probability": self.getOrDefault("probability_col"),
        }
        return scored(dataset, self.getOrDefault("feature_cols"), scorer, state.output_size, names)

    def write(self) -> StateWriter:
        return StateWriter(self)

    @classmethod
    def read(cls) -> StateReader:
        return StateReader(cls)


def _callbacks(callbacks: Any) -> bytes | None:
    """The callbacks pickled for the ranks, each checked alone first so that an error names the one at fault."""
    if not callbacks:
        return None
    for number, callback in enumerate(callbacks):
        checks.pickled(f"callback {type(callback).__name__} (callbacks[{number}])", callback)
    return checks.pickled("callbacks", list(callbacks))


def _custom_objects(given: Any) -> dict[str, Any]:
    """`custom_objects` as a dict by name (empty for None), refused clearly when it is something else."""
    if given is None:
        return {}
    if not isinstance(given, dict) or not all(isinstance(name, str) for name in given):
        raise InvalidArgumentError(
            f"custom_objects={given!r}: give a dict of the names the model uses to their functions or classes, "
            "e.g. {'act_scaled': act_scaled}"
        )
    return dict(given)


def _rank_keras(package: str) -> dict[str, str]:
    """The ranks' `tf.keras` is the model's own Keras: Keras 3 for a Keras 3 model (sparkrunner's default for
    ranks is tf_keras, `tf_env.defaults`); a TF_USE_LEGACY_KERAS the driver's environment has wins."""
    if package != "keras" or "TF_USE_LEGACY_KERAS" in os.environ:
        return {}
    return {"TF_USE_LEGACY_KERAS": "0"}


def _check_shapes(spec: KerasSpec, input_shapes: Any, data: Any) -> None:
    """The feature columns fill the model's inputs and the label columns their `label_shapes`, by the widths
    the handed-over rows have (before any rank starts)."""
    widths = {column.name: math.prod(column.shape) for column in data.columns}
    for what, shapes, names in (
        ("the model's input shape(s)", input_shapes, spec.feature_cols),
        ("label_shapes", spec.label_shapes, spec.label_cols),
    ):
        if shapes:
            features.check_widths(what, shapes, names, [widths[name] for name in names])


def _probability(loss: Any) -> str | None:
    return "given" if loss in _CLASSIFIER_LOSSES else None


def _keras(package: str) -> Any:
    import importlib

    return importlib.import_module(package)
