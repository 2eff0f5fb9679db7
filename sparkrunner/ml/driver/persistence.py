"""Saving and loading the stages as Spark ML does its own: Params in ``metadata/`` (what `Pipeline`,
`PipelineModel` and the tuning models read to find the class), what JSON cannot hold (a fitted model, or an
unfitted estimator's model, optimizer, loss and functions) pickled in ``data/`` as Parquet, so any path Spark
writes to works (local, HDFS, an object store, DBFS), over Spark Connect too."""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
from pyspark.ml.util import (
    DefaultParamsReader,
    DefaultParamsWriter,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)

from sparkrunner.ml.driver import checks
from sparkrunner.placement.spark_sessions import is_connect_session

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
            self.instance, path, _spark(self), extraMetadata={_STATE_KEY: state.describe()}
        )
        rows = self.sparkSession.createDataFrame(
            [(state.payload, state.predictor)], "payload binary, predictor binary"
        )
        rows.coalesce(1).write.parquet(f"{path}/data")


class SavedReader(MLReader[Any]):
    """Reads a saved stage into a new instance of `cls`: the saved uid (tuning models name their param maps'
    Params by it) and JSON Params, then what the stage's kind restores from its row in ``data/``."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> Any:
        metadata = DefaultParamsReader.loadMetadata(path, _spark(self))
        instance = self.cls()
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata)
        self.restore(instance, metadata, self.sparkSession.read.parquet(f"{path}/data").collect()[0])
        return instance

    def restore(self, instance: Any, metadata: dict[str, Any], row: Any) -> None:
        raise NotImplementedError


class StateReader(SavedReader):
    """Reads what `StateWriter` wrote (with a new model id)."""

    def restore(self, instance: Any, metadata: dict[str, Any], row: Any) -> None:
        predictor = None if row["predictor"] is None else bytes(row["predictor"])
        instance.state = ModelState(
            payload=bytes(row["payload"]), predictor=predictor, **metadata[_STATE_KEY]
        )


class ParamsWriter(MLWriter):
    """Writes an unfitted stage: the Params JSON holds in ``metadata/`` (readable, and what Spark ML's readers
    look up), the others (model, optimizer, loss, functions, callbacks) cloudpickled together in ``data/``, so
    an optimizer keeps optimizing the parameters of the model saved with it (Horovod's estimators pickle theirs
    into their metadata)."""

    def __init__(self, instance: Any) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        given = self.instance.saved_values()
        as_json = {name: value for name, value in given.items() if _is_json(value)}
        pickled = {name: value for name, value in given.items() if name not in as_json}
        name = type(self.instance).__name__
        payload = checks.pickled(
            f"{name}'s {', '.join(pickled)}", pickled, to="a saved stage (Spark ML's writer)"
        )
        DefaultParamsWriter.saveMetadata(self.instance, path, _spark(self), paramMap=as_json)
        rows = self.sparkSession.createDataFrame([(payload,)], "params binary")
        rows.coalesce(1).write.parquet(f"{path}/data")


class ParamsReader(SavedReader):
    """Reads what `ParamsWriter` wrote."""

    def restore(self, instance: Any, metadata: dict[str, Any], row: Any) -> None:
        instance._set(**cloudpickle.loads(bytes(row["params"])))


class SavedParams(MLWritable, MLReadable[Any]):
    """``write().save(path)`` and ``load(path)`` for a stage whose state is all in its Params (an unfitted
    estimator), also inside a saved `Pipeline` and Spark ML's tuning models."""

    def write(self) -> ParamsWriter:
        return ParamsWriter(self)

    def saved_values(self) -> dict[str, Any]:
        """The Params set, by name, as they are saved (a stage whose values do not pickle gives their config)."""
        return {param.name: value for param, value in self._paramMap.items()}  # type: ignore[attr-defined]

    @classmethod
    def read(cls) -> ParamsReader:
        return ParamsReader(cls)


def _is_json(value: Any) -> bool:
    """JSON keeps `value` as it is (a tuple would come back a list, a numpy number not at all)."""
    try:
        return bool(json.loads(json.dumps(value)) == value) and not isinstance(value, tuple)
    except (TypeError, ValueError):
        return False


def _spark(rw: Any) -> Any:
    """What Spark ML's metadata helpers take: the session over Connect (it has no SparkContext), else the
    SparkContext (pyspark 3.5's helpers take only that)."""
    spark = rw.sparkSession
    return spark if is_connect_session(spark) else spark.sparkContext
