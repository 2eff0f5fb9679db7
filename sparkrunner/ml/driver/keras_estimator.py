"""`KerasEstimator` and `KerasModel`: a Keras model trained on sparkrunner's ranks (TensorFlow's
MultiWorkerMirroredStrategy) as a Spark ML stage, and the fitted model scoring on the executors."""

from __future__ import annotations

from typing import Any

from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.util import MLReadable, MLWritable

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import keras_models
from sparkrunner.ml.driver import checks, fit_stage, mlflow_logging
from sparkrunner.ml.driver.persistence import ModelState, StateReader, StateWriter, unfitted_cannot_be_saved
from sparkrunner.ml.driver.scoring import model_source, scored
from sparkrunner.ml.entry import RankEntry
from sparkrunner.ml.params import KerasParams, ScoringParams
from sparkrunner.ml.spec import KerasSpec, TrainResult
from sparkrunner.ml.tasks.scoring import BatchScorer

_TRAIN = RankEntry("sparkrunner.ml.ranks.keras_training", "train")
_CLASSIFIER_LOSSES = ("sparse_categorical_crossentropy", "categorical_crossentropy")


class KerasEstimator(Estimator, KerasParams, MLWritable):
    """Trains a Keras model (``tf_keras``, or Keras 3 on one rank) on `np` ranks; `fit(df)` returns a
    `KerasModel`. The model receives one float32 matrix per batch (the `feature_cols` side by side) and the
    `label_cols` as float32 labels; a classifier (loss ``sparse_categorical_crossentropy`` or
    ``categorical_crossentropy`` with a softmax output) also gets a `probability` column. See docs/ml.md."""

    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(
        self,
        *,
        model: Any = None,
        optimizer: Any = "adam",
        loss: Any = "mse",
        metrics: list[Any] | None = None,
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

    def write(self) -> Any:
        raise unfitted_cannot_be_saved("KerasEstimator", "a live model", "KerasModel")

    def _fit(self, dataset: Any) -> KerasModel:
        fit_stage.check_input(self, dataset)
        spec = self._spec(dataset)
        fitted = fit_stage.fit_on_ranks(self, dataset, spec, _TRAIN, spec)
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

    def _spec(self, dataset: Any) -> KerasSpec:
        get = self.getOrDefault
        model = get("model")
        package = keras_models.package_of(model)
        if package is None:
            raise InvalidArgumentError(f"model must be a Keras model, not {type(model).__name__}")
        if package == "keras" and abs(fit_stage.rank_count(self, dataset)) > 1:
            raise InvalidArgumentError(
                "a Keras 3 model trains on one rank only here: TensorFlow's MultiWorkerMirroredStrategy fails "
                "under Keras 3's fit on CPU. Build the model with tf_keras (import tf_keras as keras, or set "
                "TF_USE_LEGACY_KERAS=1 and use tf.keras), or set np=1"
            )
        optimizer = get("optimizer")
        if not isinstance(optimizer, str):
            optimizer = _keras(package).optimizers.serialize(optimizer)
        compiled = checks.pickled("optimizer, loss or metrics", (optimizer, get("loss"), get("metrics")))
        return fit_stage.spec(
            self, KerasSpec, package=package, model=keras_models.packed(model), compiled=compiled
        )

    def _logged(self, dataset: Any, fitted: fit_stage.Fitted, result: TrainResult) -> str | None:
        """The fitted model in the fit's MLflow run (Keras' flavor, signature from two rows' features)."""
        if fitted.tracking is None or not fitted.mlflow_run_id or not self.getOrDefault("log_model"):
            return None
        import cloudpickle

        example = mlflow_logging.feature_example(dataset, self.getOrDefault("feature_cols"))
        model = cloudpickle.loads(result.model)
        return mlflow_logging.log_keras_model(fitted.tracking.uri, fitted.mlflow_run_id, model, example)


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


def _probability(loss: Any) -> str | None:
    return "given" if loss in _CLASSIFIER_LOSSES else None


def _keras(package: str) -> Any:
    import importlib

    return importlib.import_module(package)
