"""Drop-ins for ``horovod.spark.torch.TorchEstimator`` / ``TorchModel``: Horovod's signature, sparkrunner's
`sparkrunner.ml.TorchEstimator` underneath (DDP on sparkrunner's ranks, rows through `materialize`/`stream`).

    from sparkrunner.compat.horovod_spark import TorchEstimator     # was: from horovod.spark.torch import ...
    model = TorchEstimator(num_proc=2, store=store, model=net, optimizer=opt, loss=loss_fn,
                           feature_cols=["features"], label_cols=["y"], batch_size=32, epochs=5).fit(df)
    model.transform(df)                                              # appends "y__output", as Horovod's does
"""

from __future__ import annotations

from typing import Any

from pyspark import keyword_only

from sparkrunner.compat.horovod_params import output_col, translated
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import losses
from sparkrunner.ml.driver import checks, keras_estimator, torch_estimator
from sparkrunner.ml.driver.persistence import ModelState
from sparkrunner.ml.driver.scoring import ml_functions


class HorovodModelAccessors:
    """Horovod's accessors on a fitted model (`getHistory`, `getOutputCols`, ...), besides sparkrunner's own."""

    history: dict[str, list[float]]
    run_id: str | None
    getOrDefault: Any
    _set: Any

    def getHistory(self) -> dict[str, list[float]]:
        """Each epoch's metrics (``loss``, ``val_loss``, and the others the estimator reports)."""
        return self.history

    def getRunId(self) -> str | None:
        return self.run_id

    def getFeatureColumns(self) -> list[str]:
        return list(self.getOrDefault("feature_cols"))

    def getOutputCols(self) -> list[str]:
        """The column `transform` appends: Horovod's ``<label>__output`` unless set otherwise."""
        return [self.getOrDefault("prediction_col")]

    def setOutputCols(self, value: list[str]) -> Any:
        """Name the output column (one name: sparkrunner writes every output of a row into one column)."""
        (name,) = value
        return self._set(prediction_col=name)


class TorchModel(HorovodModelAccessors, torch_estimator.TorchModel):
    """``horovod.spark.torch.TorchModel``: sparkrunner's `TorchModel` with Horovod's accessors and constructor,
    so a model trained elsewhere scores as Horovod's does: ``TorchModel(model=net, feature_columns=["x"],
    label_columns=["y"], input_shapes=[[-1, n]])`` (``forward`` gets one tensor per feature column in its shape).
    Several outputs per row come back as an ML vector."""

    @keyword_only
    def __init__(
        self,
        history: Any = None,
        model: Any = None,
        feature_columns: list[str] | None = None,
        input_shapes: Any = None,
        label_columns: list[str] | None = None,
        optimizer: Any = None,
        run_id: str | None = None,
        _metadata: dict[str, Any] | None = None,
        loss: Any = None,
        loss_constructors: Any = None,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        self.optimizer = optimizer
        if model is not None:
            self._set(**_hand_built_params(feature_columns, label_columns, input_shapes))
            shapes = _input_shapes(self.getOrDefault("feature_cols"), input_shapes, _metadata)
            payload = checks.pickled("model", model, to="the executors")
            self.state = ModelState(
                payload,
                _output_size(model, shapes),
                losses.probability_kind(loss),
                history or {},
                run_id=run_id,
            )

    def getOptimizer(self) -> Any:
        """The optimizer given to the constructor (Horovod's model keeps it; a fit's model has none)."""
        return self.optimizer

    def _transform(self, dataset: Any) -> Any:
        scored = super()._transform(dataset)
        if self.state.probability is not None or self.state.output_size == 1:
            return scored
        name = self.getOrDefault("prediction_col")
        return scored.withColumn(name, ml_functions(dataset).array_to_vector(scored[name]))


def _hand_built_params(feature_columns: Any, label_columns: Any, input_shapes: Any) -> dict[str, Any]:
    """The Params of a model built by hand, from Horovod's constructor's names."""
    if not feature_columns:
        raise InvalidArgumentError(
            "feature_columns is empty: name the columns the model reads, e.g. feature_columns=['features']"
        )
    output = output_col(label_columns)
    shaped = {"input_shapes": input_shapes} if input_shapes is not None else {}
    return {"feature_cols": list(feature_columns), **shaped, **({"prediction_col": output} if output else {})}


def _input_shapes(
    feature_cols: list[str], input_shapes: Any, metadata: dict[str, Any] | None
) -> list[tuple[int, ...]]:
    """The row shapes of the model's inputs: one per column from `input_shapes` (``[[-1, n]]``), else the
    feature matrix's width from Horovod's column metadata (``util._get_metadata(df)``: each column's ``shape``)."""
    if input_shapes is not None:
        return list(checks.row_shapes("input_shapes", input_shapes, feature_cols) or ())
    if metadata is not None and all(c in metadata for c in feature_cols):
        return [(sum(int(metadata[c]["shape"]) for c in feature_cols),)]
    raise InvalidArgumentError(
        "a TorchModel built by hand needs input_shapes=[[n]] (the width of its feature matrix) or Horovod's "
        "_metadata=util._get_metadata(df), so that the width of the model's output is known before scoring"
    )


def _output_size(model: Any, shapes: list[tuple[int, ...]]) -> int:
    """Outputs per row: the model's forward pass on one row of zeros in each input's shape."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return int(model(*[torch.zeros(1, *shape) for shape in shapes]).numel())
    finally:
        model.train(was_training)


class KerasModel(HorovodModelAccessors, keras_estimator.KerasModel):
    """``horovod.spark.keras.KerasModel``: sparkrunner's `KerasModel` with Horovod's accessors."""


class TorchEstimator(torch_estimator.TorchEstimator):
    """``horovod.spark.torch.TorchEstimator``'s arguments (see `sparkrunner.compat.horovod_params` for what is
    refused), plus sparkrunner's own as keywords (`np`, `launcher`, `data`, `checkpoint_dir`, `max_failures`, `timeout`,
    `tracking`). `fit` returns a `TorchModel` whose output column is ``<label>__output``."""

    @keyword_only
    def __init__(
        self,
        num_proc: int | None = None,
        data_module: Any = None,
        model: Any = None,
        backend: Any = None,
        store: Any = None,
        optimizer: Any = None,
        loss: Any = None,
        loss_constructors: Any = None,
        metrics: Any = None,
        loss_weights: Any = None,
        sample_weight_col: str | None = None,
        gradient_compression: Any = None,
        feature_cols: list[str] | None = None,
        continuous_cols: Any = None,
        categorical_cols: Any = None,
        input_shapes: Any = None,
        validation: float | str | None = None,
        label_cols: list[str] | None = None,
        callbacks: Any = None,
        batch_size: int | None = None,
        val_batch_size: Any = None,
        epochs: int | None = None,
        verbose: int = 1,
        random_seed: int | None = None,
        shuffle_buffer_size: Any = None,
        shuffle: bool = True,
        partitions_per_process: Any = None,
        run_id: str | None = None,
        train_minibatch_fn: Any = None,
        train_steps_per_epoch: Any = None,
        validation_steps_per_epoch: Any = None,
        transformation_fn: Any = None,
        train_reader_num_workers: Any = None,
        val_reader_num_workers: Any = None,
        reader_pool_type: str = "thread",
        label_shapes: Any = None,
        inmemory_cache_all: bool = False,
        use_gpu: bool = True,
        mp_start_method: Any = None,
        backward_passes_per_step: int = 1,
        **sparkrunner_params: Any,
    ) -> None:
        super().__init__(**_torch_params(self._input_kwargs))

    @keyword_only
    def setParams(self, **horovod_params: Any) -> TorchEstimator:
        return self._set(**_torch_params(self._input_kwargs))

    def _fit(self, dataset: Any) -> TorchModel:
        return as_drop_in(TorchModel(), super()._fit(dataset))


def as_drop_in(model: Any, fitted: Any) -> Any:
    """`model` (a drop-in class) holding what `fitted` (sparkrunner's own model) holds."""
    fitted._copyValues(model)
    model.state = fitted.state
    return model


def _torch_params(given: dict[str, Any]) -> dict[str, Any]:
    """`translated` Params, with Horovod's loss forms (`loss`, or one of `loss_constructors`)."""
    constructors = given.get("loss_constructors")
    params = translated({k: v for k, v in given.items() if k != "loss_constructors"}, _TORCH_ALSO)
    weighted = params.get("sample_weight_col") is not None
    if "gradient_compression" in params:
        params["gradient_compression"] = _compression(params["gradient_compression"])
    if constructors:
        if "loss" in params:
            raise InvalidArgumentError(
                "loss and loss_constructors are both given: give one of them (loss_constructors builds the loss "
                "in each rank, for a loss that cannot be pickled)"
            )
        constructor = _one("loss_constructors", constructors, "loss constructor")
        if not callable(constructor):
            raise InvalidArgumentError(
                f"loss_constructors={constructors!r}: give a list of one function that builds the loss, called "
                "without arguments (e.g. [torch.nn.CrossEntropyLoss])"
            )
        params["loss"] = losses.Constructed(constructor, weighted)
    elif "loss" in params:
        params["loss"] = losses.horovod_form(_one("loss", params["loss"], "loss"), weighted)
    return params


_TORCH_ALSO = (
    "backward_passes_per_step", "input_shapes", "label_shapes", "inmemory_cache_all", "metrics",
    "gradient_compression", "use_gpu",
)  # fmt: skip
"""What sparkrunner's TorchEstimator honours that its other estimators do not."""


_COMPRESSIONS = {"NoneCompressor": None, "none": None, "FP16Compressor": "fp16", "fp16": "fp16"}
"""Horovod's compressors (``hvd.Compression.none`` / ``.fp16``, classes named so) and their names, as
`gradient_compression` values: told apart by name, so Horovod need not be imported."""


def _compression(value: Any) -> str | None:
    name = value if isinstance(value, str) else getattr(value, "__name__", type(value).__name__)
    if name not in _COMPRESSIONS:
        raise InvalidArgumentError(
            f"gradient_compression={value!r}: give hvd.Compression.fp16 (DDP's fp16 compression hook averages the "
            "gradients in half precision) or hvd.Compression.none"
        )
    return _COMPRESSIONS[name]


def _one(name: str, given: Any, what: str) -> Any:
    """Horovod's one-element list (one loss for the one output): its element; one given alone as it is."""
    items = given if isinstance(given, (list, tuple)) else [given]
    if len(items) != 1:
        raise InvalidArgumentError(
            f"{name}={given!r}: one {what} per label column is not supported; give one {what} over all label "
            "columns (it receives the outputs and the labels side by side)"
        )
    return items[0]


class KerasEstimator(keras_estimator.KerasEstimator):
    """``horovod.spark.keras.KerasEstimator``'s arguments (see `sparkrunner.compat.horovod_params` for what is
    refused; `metrics`, `callbacks`, `label_shapes`, `inmemory_cache_all`, `custom_objects` and
    `checkpoint_callback` (the fitted model is its best epoch, as Horovod's) are honoured, and the feature columns
    are fed in the model's input shape, as Horovod does), plus sparkrunner's own as keywords. `fit` returns a `KerasModel` whose
    output column is ``<label>__output``."""

    @keyword_only
    def __init__(
        self,
        num_proc: int | None = None,
        data_module: Any = None,
        model: Any = None,
        backend: Any = None,
        store: Any = None,
        custom_objects: Any = None,
        optimizer: Any = None,
        loss: Any = None,
        loss_weights: Any = None,
        sample_weight_col: str | None = None,
        gradient_compression: Any = None,
        metrics: Any = None,
        feature_cols: list[str] | None = None,
        label_cols: list[str] | None = None,
        continuous_cols: Any = None,
        categorical_cols: Any = None,
        validation: float | str | None = None,
        callbacks: Any = None,
        batch_size: int | None = None,
        val_batch_size: Any = None,
        epochs: int | None = None,
        verbose: int | None = None,
        random_seed: int | None = None,
        shuffle_buffer_size: Any = None,
        shuffle: bool = True,
        partitions_per_process: Any = None,
        run_id: str | None = None,
        train_steps_per_epoch: Any = None,
        validation_steps_per_epoch: Any = None,
        transformation_fn: Any = None,
        train_reader_num_workers: Any = None,
        val_reader_num_workers: Any = None,
        reader_pool_type: str = "thread",
        label_shapes: Any = None,
        checkpoint_callback: Any = None,
        inmemory_cache_all: bool = False,
        backend_env: Any = None,
        use_gpu: bool = True,
        mp_start_method: Any = None,
        **sparkrunner_params: Any,
    ) -> None:
        super().__init__(**translated(self._input_kwargs, _KERAS_ALSO))

    @keyword_only
    def setParams(self, **horovod_params: Any) -> KerasEstimator:
        return self._set(**translated(self._input_kwargs, _KERAS_ALSO))

    def _fit(self, dataset: Any) -> KerasModel:
        return as_drop_in(KerasModel(), super()._fit(dataset))


_KERAS_ALSO = (
    "metrics", "callbacks", "label_shapes", "inmemory_cache_all", "custom_objects", "checkpoint_callback",
)  # fmt: skip
"""What sparkrunner's KerasEstimator honours that its TorchEstimator does not."""
