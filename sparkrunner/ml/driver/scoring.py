"""`transform` on the executors: the feature columns go through a pandas UDF whose Python workers load the
model once each (`scoring`), and the model's output columns are appended to the DataFrame."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd

from sparkrunner.data import columns
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import outputs
from sparkrunner.ml.driver import checks
from sparkrunner.ml.tasks.scoring import BatchScorer, ModelSource
from sparkrunner.placement.sessions import is_connect_session

_SCORED = "__sparkrunner_scored"


def scored(
    df: Any, feature_cols: Sequence[str], scorer: BatchScorer, output_size: int, names: dict[str, str]
) -> Any:
    """`df` with the model's output columns appended, named by `names` (``{"prediction": ..., "probability":
    ...}``); computed where `df`'s partitions are, in Arrow batches."""
    types = outputs.spark_types(scorer.probability, output_size)
    check_scoring_columns(df, feature_cols, [names[key] for key in types])
    F = _functions(df)
    inputs = [_as_numbers(F, df, name) for name in feature_cols]
    struct = "struct<" + ", ".join(f"{k}: {v}" for k, v in types.items()) + ">"
    frame = df.withColumn(_SCORED, _udf(df, _body(scorer, len(inputs)), struct)(*inputs))
    appended = [F.col(f"{_SCORED}.{key}").alias(names[key]) for key in types]
    return frame.select(*[F.col(f"`{c}`") for c in df.columns], *appended)


def check_scoring_columns(df: Any, feature_cols: Sequence[str], output_cols: Sequence[str]) -> None:
    """The features exist and are numbers, arrays or vectors; the output columns do not exist yet."""
    checks.check_features(df, feature_cols)
    taken = [c for c in output_cols if c in df.columns]
    if taken:
        raise InvalidArgumentError(
            f"the DataFrame already has columns {taken}: drop or rename them, or name other output columns "
            "(setPredictionCol / setProbabilityCol)"
        )


def model_source(key: str, payload: bytes, spark: Any) -> ModelSource:
    """A pickled model for the workers: broadcast once (classic Spark), or inside the UDF (Spark Connect)."""
    if is_connect_session(spark):
        return ModelSource(key, payload=payload)
    return ModelSource(key, broadcast=spark.sparkContext.broadcast(payload))


def _udf(df: Any, body: Any, struct: str) -> Any:
    """An iterator-of-batches pandas UDF of `df`'s kind of session, nondeterministic: Spark keeps it in a
    projection of its own, so one call per row feeds every output column."""
    if is_connect_session(df):  # built directly: a process with a classic session too would get a classic one
        from pyspark.sql.connect.udf import UserDefinedFunction
        from pyspark.sql.pandas.functions import PandasUDFType

        return UserDefinedFunction(body, struct, evalType=PandasUDFType.SCALAR_ITER, deterministic=False)
    return _functions(df).pandas_udf(body, struct).asNondeterministic()


def _body(scorer: BatchScorer, inputs: int) -> Any:
    """The UDF's function, typed as Spark infers an iterator-of-batches pandas UDF from."""
    if inputs == 1:

        def one(batches: Iterator[pd.Series]) -> Iterator[pd.DataFrame]:
            return scorer(batches)

        return one

    def several(batches: Iterator[tuple[pd.Series, ...]]) -> Iterator[pd.DataFrame]:
        return scorer(batches)

    return several


def _as_numbers(F: Any, df: Any, name: str) -> Any:
    """A feature column as Arrow carries it: ML vectors become arrays of doubles."""
    column = F.col(f"`{name}`")
    if columns.spark_type_name(df.schema[name].dataType) != "vector":
        return column
    return ml_functions(df).vector_to_array(column)


def ml_functions(df: Any) -> Any:
    """Spark ML's column functions (`vector_to_array`, `array_to_vector`) for `df`'s kind of session."""
    if is_connect_session(df):
        from pyspark.ml.connect import functions as connect

        return connect
    from pyspark.ml import functions as classic

    return classic


def _functions(df: Any) -> Any:
    if is_connect_session(df):
        from pyspark.sql.connect import functions

        return functions
    from pyspark.sql import functions as classic

    return classic
