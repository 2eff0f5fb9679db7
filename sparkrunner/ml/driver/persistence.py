"""Saving and loading fitted models as Spark ML does its own: Params in ``metadata/`` (what `PipelineModel`
reads to find the class), the pickled model in ``data/`` as Parquet, so any path Spark writes to works
(local, HDFS, an object store, DBFS)."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from typing import Any

from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReader, MLWriter

from sparkrunner.errors import InvalidArgumentError

_STATE_KEY = "sparkrunner"


@dataclass(frozen=True)
class ModelState:
    """What a fitted model holds besides its Params: the pickled model and what fit learnt about it."""

    payload: bytes = field(repr=False)
    output_size: int = 1
    probability: str | None = None
    history: dict[str, list[float]] = field(default_factory=dict)
    mlflow_run_id: str | None = None
    run_id: str | None = None
    mlflow_model_uri: str | None = None
    predictor: bytes | None = field(default=None, repr=False)
    """A pickled ``predict(model, features)``, for models that are not torch modules."""
    model_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Names the model in each Spark Python worker's cache: a new id for every fit and every load."""

    def describe(self) -> dict[str, Any]:
        return {
            k: v for k, v in dataclasses.asdict(self).items() if k not in ("payload", "predictor", "model_id")
        }


class StateWriter(MLWriter):
    """Writes a model with a `state` attribute (a `ModelState`)."""

    def __init__(self, instance: Any) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        state: ModelState = self.instance.state
        DefaultParamsWriter.saveMetadata(
            self.instance, path, self.sc, extraMetadata={_STATE_KEY: state.describe()}
        )
        rows = self.sparkSession.createDataFrame(
            [(state.payload, state.predictor)], "payload binary, predictor binary"
        )
        rows.coalesce(1).write.parquet(f"{path}/data")


class StateReader(MLReader[Any]):
    """Reads what `StateWriter` wrote into a new instance of `cls` (with a new model id)."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> Any:
        metadata = DefaultParamsReader.loadMetadata(path, self.sc)
        instance = self.cls()
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata)
        row = self.sparkSession.read.parquet(f"{path}/data").collect()[0]
        predictor = None if row["predictor"] is None else bytes(row["predictor"])
        instance.state = ModelState(
            payload=bytes(row["payload"]), predictor=predictor, **metadata[_STATE_KEY]
        )
        return instance


def unfitted_cannot_be_saved(estimator: str, holds: str, fitted: str) -> InvalidArgumentError:
    """The error `write()` of an unfitted estimator raises: what it holds live cannot go through Spark ML's
    writer, and what to save instead."""
    return InvalidArgumentError(
        f"an unfitted {estimator} holds {holds}, which Spark ML's writer cannot save: save the fitted {fitted} "
        "(model.write().save(path)), or the Pipeline after fit"
    )
