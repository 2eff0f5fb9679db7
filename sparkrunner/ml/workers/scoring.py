"""Scoring in Spark's Python workers: each worker loads a model once and reuses it for every task and Arrow batch
it scores, on the task's GPU when Spark assigned one, while it stays among the few models a worker keeps
(`model_cache`: least recently used out beyond a count and a share of the worker's and the GPU's memory)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import cloudpickle
import numpy as np

from sparkrunner.data import columns
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import features, outputs
from sparkrunner.ml.model_cache import Limits, ModelCache
from sparkrunner.ml.tracking_uri import tracking_uri_for_call
from sparkrunner.ml.workers import torch_forward

log = logging.getLogger(__name__)

MODELS = ModelCache(freeze=True)
"""(model id, device) -> the model, in this Python worker (Spark reuses workers across tasks with
spark.python.worker.reuse, its default): a bounded set, frozen out of the collector's walks while kept."""


@dataclass(frozen=True)
class ModelSource:
    """Where a worker gets the model the first time: pickled bytes (inline or a broadcast of them), a builder
    function, or an MLflow model URI. `key` names the model for the cache: one load per worker and key."""

    key: str
    payload: bytes | None = None
    broadcast: Any = None
    builder: Callable[[], Any] | None = None
    uri: str | None = None
    tracking_uri: str | None = None
    """The MLflow tracking server that resolves `uri` (``runs:/``, ``models:/``): the driver's."""


@dataclass(frozen=True)
class BatchScorer:
    """The body of the scoring UDF: feature columns in, output columns out (`arrow` where Spark has Arrow UDFs,
    `pandas` before).

    Args:
        source: the model.
        batch_size: rows per forward pass (each Arrow batch Spark hands over is cut into these).
        probability: the classifier's probability rule (`outputs.columns`), None for a regressor.
        predict: ``predict(model, features) -> outputs`` for models that are not torch modules or need more
            than a forward pass; default: ``model(features)`` for torch modules, else ``model.predict``.
        input_shapes: each feature column's row shape: a torch module's ``forward`` gets one tensor per column
            in its shape (Horovod's `input_shapes`), not the matrix.
        limits: how many models (and how much memory) a worker keeps: the Spark settings `transform` read
            (``spark.sparkrunner.scoring.*``), else the worker's environment.
    """

    source: ModelSource
    batch_size: int
    probability: str | None
    predict: Callable[[Any, np.ndarray], Any] | None = None
    input_shapes: tuple[tuple[int, ...], ...] | None = None
    limits: Limits | None = None

    def arrow(self, batches: Iterator[Any], names: Sequence[str]) -> Iterator[Any]:
        """An Arrow array per feature column (named `names`) in, a struct array out: whole buffers both ways,
        no pandas and no Python object per row."""
        model, device = loaded(self.source, self.limits)
        for batch in batches:
            arrays = batch if isinstance(batch, tuple) else (batch,)
            x = features.matrix([columns.column_to_numpy(n, a) for n, a in zip(names, arrays, strict=True)])
            yield outputs.as_arrow(self._columns(model, device, x))

    def pandas(self, batches: Iterator[Any]) -> Iterator[Any]:
        """A pandas Series per feature column in, a frame out (Spark before 4.1, which has no Arrow UDFs)."""
        import pandas as pd

        model, device = loaded(self.source, self.limits)
        for batch in batches:
            series = (batch,) if isinstance(batch, pd.Series) else tuple(batch)
            x = features.matrix([features.from_pandas(s) for s in series])
            yield outputs.as_pandas(self._columns(model, device, x))

    def _columns(self, model: Any, device: str, x: np.ndarray) -> dict[str, np.ndarray]:
        raw = [
            self._outputs(model, device, x[i : i + self.batch_size])
            for i in range(0, len(x), self.batch_size)
        ]
        return outputs.columns(self.probability, np.concatenate(raw) if raw else np.zeros((0, 1)))

    def _outputs(self, model: Any, device: str, x: np.ndarray) -> np.ndarray:
        if self.predict is not None:
            return np.asarray(self.predict(model, x))
        if torch_forward.is_module(model):
            inputs = [x] if self.input_shapes is None else features.split(x, self.input_shapes)
            return torch_forward.forward(model, device, inputs)
        return np.asarray(model.predict(x))


def loaded(source: ModelSource, limits: Limits | None = None) -> tuple[Any, str]:
    """The model of `source` on this task's device, loaded on this worker's first call only (or again after it
    left the worker's kept models)."""
    device = task_device()
    return MODELS.get((source.key, device), lambda: _prepared(source, device), limits or _limits()), device


def _prepared(source: ModelSource, device: str) -> Any:
    model = _load(source)
    return torch_forward.prepared(model, device) if torch_forward.is_module(model) else model


def _limits() -> Limits:
    try:
        return Limits.from_environment()
    except ValueError as e:
        raise InvalidArgumentError(str(e)) from None


def _load(source: ModelSource) -> Any:
    if source.builder is not None:
        return source.builder()
    if source.uri is not None:
        import mlflow

        with tracking_uri_for_call(source.tracking_uri or mlflow.get_tracking_uri()):
            model = mlflow.pyfunc.load_model(source.uri)
        raw = model.get_raw_model()
        return raw if torch_forward.is_module(raw) else model  # a torch module runs as one: batches, device
    payload = source.payload if source.payload is not None else source.broadcast.value
    return cloudpickle.loads(payload)


def task_device() -> str:
    """The task's own GPU when Spark assigned it one (``spark.task.resource.gpu.amount``), else the CPU."""
    from pyspark import TaskContext

    context = TaskContext.get()
    gpus = context.resources().get("gpu") if context is not None else None
    if gpus is not None and gpus.addresses:
        return f"cuda:{gpus.addresses[0]}"
    return "cpu"
