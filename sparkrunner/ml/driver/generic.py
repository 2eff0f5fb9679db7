"""Stages for models that are not a plain torch module: `FunctionEstimator` (your training function and your
predict function) and `ScoringModel` (a model trained anywhere, from an MLflow URI or a builder function).
Both score as `TorchModel` does: on the executors, loading the model once per Python worker."""

from __future__ import annotations

import uuid
from typing import Any

import cloudpickle
from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.param import TypeConverters
from pyspark.ml.util import MLReadable, MLWritable

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml.driver import checks, fit_stage
from sparkrunner.ml.driver.persistence import ModelState, SavedParams, StateReader, StateWriter
from sparkrunner.ml.driver.scoring import model_source, scored
from sparkrunner.ml.outputs import PROBABILITY_KINDS
from sparkrunner.ml.params import FunctionParams, ScoringParams, param, probability_param, with_accessors
from sparkrunner.ml.spec import FitSettings
from sparkrunner.ml.workers.scoring import BatchScorer, ModelSource
from sparkrunner.options import check_choice

_NAMES = ("prediction", "probability")


class FunctionEstimator(Estimator, FunctionParams, SavedParams):
    """``train_fn(train_data, val_data)`` on every rank (read them with ``sparkrunner.data``'s loaders; rank 0
    returns the model, anything picklable); `fit` returns a `FunctionModel` that scores with
    ``predict_fn(model, features)`` on the executors (features: a float32 matrix of the `feature_cols`)."""

    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(
        self,
        *,
        train_fn: Any = None,
        predict_fn: Any = None,
        output_size: int = 1,
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
        prediction_col: str = "prediction",
        probability_col: str = "probability",
    ) -> None:
        super().__init__()
        self._set(**self._input_kwargs)

    @keyword_only
    def setParams(self, **params: Any) -> FunctionEstimator:
        return self._set(**self._input_kwargs)

    def _fit(self, dataset: Any) -> FunctionModel:
        get = self.getOrDefault
        train_fn, predict_fn = get("train_fn"), get("predict_fn")
        for name, fn in (("train_fn", train_fn), ("predict_fn", predict_fn)):
            if not callable(fn):
                raise InvalidArgumentError(f"{name} must be a function, not {fn!r}")
        predictor = checks.pickled("predict_fn", predict_fn, "the executors")
        checks.pickled("train_fn", train_fn)
        fit_stage.check_input(self, dataset)
        fitted = fit_stage.fit_on_ranks(self, dataset, fit_stage.spec(self, FitSettings), train_fn)
        payload = checks.pickled("model train_fn returned", fitted.result)
        model = FunctionModel(
            feature_cols=get("feature_cols"), batch_size=get("batch_size"), prediction_col=get("prediction_col"),
            probability_col=get("probability_col"), output_size=get("output_size"),
        )  # fmt: skip
        model.state = ModelState(
            payload, get("output_size"), None, {}, fitted.mlflow_run_id, get("run_id"), predictor=predictor
        )
        return model


@with_accessors
class FunctionModel(Model, ScoringParams, MLWritable, MLReadable):
    """The model `FunctionEstimator.fit` returns: `transform` appends `prediction` (a double for one output per
    row, else an array), computed by ``predict_fn`` on the executors."""

    output_size = param("output_size", "outputs per row", TypeConverters.toInt)
    state: ModelState
    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(self, **params: Any) -> None:
        super().__init__()
        self._setDefault(output_size=1)
        self._set(**self._input_kwargs)

    @property
    def mlflow_run_id(self) -> str | None:
        return self.state.mlflow_run_id

    def getModel(self) -> Any:
        return cloudpickle.loads(self.state.payload)

    def _transform(self, dataset: Any) -> Any:
        state = self.state
        predict = cloudpickle.loads(state.predictor) if state.predictor is not None else None
        source = model_source(state.model_id, state.payload, dataset.sparkSession)
        scorer = BatchScorer(source, self.getOrDefault("batch_size"), None, predict)
        names = {key: self.getOrDefault(f"{key}_col") for key in _NAMES}
        return scored(
            dataset, self.getOrDefault("feature_cols"), scorer, self.getOrDefault("output_size"), names
        )

    def write(self) -> StateWriter:
        return StateWriter(self)

    @classmethod
    def read(cls) -> StateReader:
        return StateReader(cls)


@with_accessors
class ScoringModel(Model, ScoringParams, SavedParams):
    """Scores with a model trained anywhere: ``model_uri`` (an MLflow model: torch modules run as such, other
    flavors through ``pyfunc``) or ``builder()`` (a function that returns the model), loaded once per Python
    worker; ``predict_fn(model, features)`` when a forward pass (or ``model.predict``) is not how it predicts.

        ScoringModel(model_uri="models:/digits/3", feature_cols=["pixels"], output_size=10).transform(df)
    """

    model_uri = param("model_uri", "an MLflow model URI (runs:/..., models:/..., a path)")
    tracking_uri = param(
        "tracking_uri", "the MLflow tracking URI that resolves model_uri (default: the driver's)"
    )
    builder = param("builder", "builder() -> the model, called once per Python worker")
    predict_fn = param("predict_fn", "predict_fn(model, features) -> outputs (rows, output_size)")
    output_size = param("output_size", "outputs per row (classes, for a classifier)", TypeConverters.toInt)
    probability = probability_param()
    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(
        self,
        *,
        model_uri: str | None = None,
        builder: Any = None,
        feature_cols: list[str] | None = None,
        batch_size: int = 32,
        predict_fn: Any = None,
        output_size: int = 1,
        probability: str | None = None,
        tracking_uri: str | None = None,
        prediction_col: str = "prediction",
        probability_col: str = "probability",
    ) -> None:
        super().__init__()
        self._setDefault(
            model_uri=None, tracking_uri=None, builder=None, predict_fn=None, output_size=1, probability=None
        )
        self._set(**self._input_kwargs)
        self._key = uuid.uuid4().hex

    def _transform(self, dataset: Any) -> Any:
        get = self.getOrDefault
        probability = check_choice("probability", get("probability"), PROBABILITY_KINDS)
        scorer = BatchScorer(self._source(), get("batch_size"), probability, get("predict_fn"))
        names = {key: get(f"{key}_col") for key in _NAMES}
        return scored(dataset, get("feature_cols"), scorer, get("output_size"), names)

    def _source(self) -> ModelSource:
        uri, builder = self.getOrDefault("model_uri"), self.getOrDefault("builder")
        if (uri is None) == (builder is None):
            raise InvalidArgumentError(
                "give ScoringModel one of model_uri (an MLflow model) or builder (a function)"
            )
        if builder is not None and not callable(builder):
            raise InvalidArgumentError(f"builder must be a function that returns the model, not {builder!r}")
        if uri is not None:
            return ModelSource(f"{uri}#{self._key}", uri=str(uri), tracking_uri=self._tracking_uri())
        checks.pickled("builder", builder, "the executors")
        return ModelSource(self._key, builder=builder)

    def _tracking_uri(self) -> str:
        """`tracking_uri`, else the driver's MLflow tracking URI (as an absolute URI the workers can use)."""
        import mlflow

        from sparkrunner.observe.tracking import absolute_tracking_uri

        return absolute_tracking_uri(self.getOrDefault("tracking_uri") or mlflow.get_tracking_uri())
