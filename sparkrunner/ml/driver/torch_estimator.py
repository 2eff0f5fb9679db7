"""`TorchEstimator` and `TorchModel`: a torch `nn.Module` trained with DDP on sparkrunner's ranks as a Spark ML
stage, and the fitted model scoring on the executors."""

from __future__ import annotations

from typing import Any

import cloudpickle
from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.util import MLReadable, MLWritable

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import losses, requirements
from sparkrunner.ml.driver import checks, fit_stage, mlflow_logging
from sparkrunner.ml.driver.persistence import ModelState, SavedParams, StateReader, StateWriter
from sparkrunner.ml.driver.scoring import model_source, scored
from sparkrunner.ml.entry import RankEntry
from sparkrunner.ml.features import check_widths
from sparkrunner.ml.params import ScoringParams, TorchParams, input_shapes_param, with_accessors
from sparkrunner.ml.spec import TrainResult, TrainSpec
from sparkrunner.ml.workers.scoring import BatchScorer
from sparkrunner.options import check_choice, check_number

_TRAIN = RankEntry("sparkrunner.ml.ranks.training", "train")
COMPRESSIONS = ("fp16",)
"""`gradient_compression`'s values besides None (full precision)."""


class TorchEstimator(Estimator, TorchParams, SavedParams):
    """Trains a torch ``nn.Module`` on `np` ranks with DistributedDataParallel; `fit(df)` returns a `TorchModel`.

    The rows reach the ranks through Spark (`materialize` or `stream`), never through the driver. The model
    receives one float32 matrix per batch: the `feature_cols` side by side (numbers, arrays, ML vectors), or
    with `input_shapes` (Horovod's) one tensor per feature column in its shape; the `loss` sees its outputs and
    the `label_cols` (class indices for ``cross_entropy``/``nll``). See docs/ml.md for every Param.
    """

    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(
        self,
        *,
        model: Any = None,
        optimizer: Any = None,
        loss: Any = "mse",
        backward_passes_per_step: int = 1,
        gradient_compression: str | None = None,
        use_gpu: bool = True,
        metrics: list[Any] | None = None,
        input_shapes: list[list[int]] | None = None,
        label_shapes: list[list[int]] | None = None,
        inmemory_cache_all: bool = False,
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
    def setParams(self, **params: Any) -> TorchEstimator:
        return self._set(**self._input_kwargs)

    def _fit(self, dataset: Any) -> TorchModel:
        fit_stage.check_input(self, dataset)
        spec = self._spec(dataset)
        fitted = fit_stage.fit_on_ranks(self, dataset, spec, _TRAIN, spec)
        return fitted_torch_model(self, dataset, fitted, spec)

    def _spec(self, dataset: Any) -> TrainSpec:
        get = self.getOrDefault
        module, optimizer, loss = get("model"), get("optimizer"), get("loss")
        if not _is_module(module):
            raise InvalidArgumentError(f"model must be a torch.nn.Module, not {type(module).__name__}")
        checks.check_loss(loss)
        check_number("backward_passes_per_step", get("backward_passes_per_step"), 1)
        compression = get("gradient_compression")
        if compression is not None:
            check_choice("gradient_compression", compression, COMPRESSIONS)
        metrics = checks.metric_functions(get("metrics"))
        payload = checks.pickled("model, optimizer or loss", (module, optimizer, loss, metrics))
        return fit_stage.spec(
            self, TrainSpec, payload=payload, probability=losses.probability_kind(loss),
            backward_passes_per_step=get("backward_passes_per_step"), gradient_compression=compression,
            use_gpu=get("use_gpu"),
            **input_contract(self, dataset),
        )  # fmt: skip


@with_accessors
class TorchModel(Model, ScoringParams, MLWritable, MLReadable):
    """A fitted torch model: `transform(df)` appends `prediction` (and `probability` for a classifier) computed
    on the executors, each Python worker loading the model once. ``history`` holds each epoch's metrics.
    With `input_shapes`, ``forward`` gets one tensor per feature column in its shape, as in training."""

    input_shapes = input_shapes_param()
    state: ModelState

    _input_kwargs: dict[str, Any]

    @keyword_only
    def __init__(self, **params: Any) -> None:
        super().__init__()
        self._setDefault(input_shapes=None)
        self._set(**self._input_kwargs)

    @property
    def history(self) -> dict[str, list[float]]:
        """Per-epoch metrics: ``loss``, ``val_loss`` and, for classifiers, ``accuracy``, ``val_accuracy``."""
        return self.state.history

    @property
    def mlflow_run_id(self) -> str | None:
        """The MLflow run that recorded the fit (None when tracking was off)."""
        return self.state.mlflow_run_id

    @property
    def run_id(self) -> str | None:
        return self.state.run_id

    @property
    def mlflow_model_uri(self) -> str | None:
        """The model logged in MLflow (``runs:/<id>/model``-like), for ``mlflow.pyfunc.load_model`` or
        `ScoringModel`; None when tracking or `log_model` was off."""
        return self.state.mlflow_model_uri

    def getModel(self) -> Any:
        """The trained ``nn.Module`` (on the CPU), as Horovod's TorchModel gives it."""
        return cloudpickle.loads(self.state.payload)

    def _transform(self, dataset: Any) -> Any:
        state, get = self.state, self.getOrDefault
        shapes = checks.row_shapes("input_shapes", get("input_shapes"), get("feature_cols"))
        source = model_source(state.model_id, state.payload, dataset.sparkSession)
        scorer = BatchScorer(source, get("batch_size"), state.probability, input_shapes=shapes)
        names = {"prediction": get("prediction_col"), "probability": get("probability_col")}
        return scored(dataset, get("feature_cols"), scorer, state.output_size, names)

    def write(self) -> StateWriter:
        return StateWriter(self)

    @classmethod
    def read(cls) -> StateReader:
        return StateReader(cls)


def fitted_torch_model(stage: Any, dataset: Any, fitted: fit_stage.Fitted, spec: TrainSpec) -> TorchModel:
    """The `TorchModel` of a fit whose rank 0 returned a pickled torch module (TorchEstimator's and
    LightningEstimator's), logged to the fit's MLflow run when tracking and `log_model` are on."""
    get = stage.getOrDefault
    result: TrainResult = fitted.result
    model = TorchModel(
        feature_cols=get("feature_cols"), batch_size=get("batch_size"), prediction_col=get("prediction_col"),
        probability_col=get("probability_col"), input_shapes=get("input_shapes"),
    )  # fmt: skip
    model.state = ModelState(
        result.model, result.output_size, spec.probability, result.history, fitted.mlflow_run_id,
        get("run_id"), _logged(stage, dataset, fitted, result, spec.input_shapes),
    )  # fmt: skip
    return model


def input_contract(stage: Any, df: Any) -> dict[str, Any]:
    """The `TrainSpec` fields of Horovod's input contract (`input_shapes`, `label_shapes`, `inmemory_cache_all`)
    and loop settings (`fit_stage.loop_fields`), checked against `df`'s columns before any rank starts."""
    get = stage.getOrDefault
    features, labels = get("feature_cols"), get("label_cols")
    inputs = checks.row_shapes("input_shapes", get("input_shapes"), features)
    outputs = checks.row_shapes("label_shapes", get("label_shapes"), labels)
    if outputs is not None and len(labels) > 1:
        raise InvalidArgumentError(
            f"label_shapes with {len(labels)} label columns: the loss gets one tensor of labels (the columns "
            "side by side), so only one label column can be shaped; reshape inside the loss instead"
        )
    for name, columns, shapes in (("input_shapes", features, inputs), ("label_shapes", labels, outputs)):
        if shapes is not None:
            widths = checks.column_widths(df, columns)
            check_widths(name, shapes, columns, [widths[column] for column in columns])
    return {
        "input_shapes": inputs, "label_shapes": outputs, "inmemory_cache_all": get("inmemory_cache_all"),
        **fit_stage.loop_fields(stage),
    }  # fmt: skip


def _logged(
    stage: Any,
    dataset: Any,
    fitted: fit_stage.Fitted,
    result: TrainResult,
    shapes: tuple[tuple[int, ...], ...] | None,
) -> str | None:
    """The fitted model in the fit's MLflow run (pytorch flavor, signature from two rows' features); with the
    fit's input `shapes` (`checks.row_shapes`), as a module that takes the feature matrix."""
    if fitted.tracking is None or not fitted.mlflow_run_id or not stage.getOrDefault("log_model"):
        return None
    get = stage.getOrDefault
    names = get("feature_cols")
    inputs, example = (
        mlflow_logging.feature_schema(dataset, names),
        mlflow_logging.feature_example(dataset, names),
    )
    module, modules = requirements.loaded_with_modules(result.model)
    if shapes is not None:  # the logged model takes the feature matrix, as transform's input
        from sparkrunner.ml.shaped_inputs import ShapedInputs

        module = ShapedInputs(module, shapes)
        modules.add("sparkrunner")
    return mlflow_logging.log_torch_model(
        fitted.tracking.uri, fitted.mlflow_run_id, module, inputs, example, modules, result.versions
    )


def _is_module(value: Any) -> bool:
    import torch

    return isinstance(value, torch.nn.Module)
