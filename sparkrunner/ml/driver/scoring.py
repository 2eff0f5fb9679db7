"""`transform` on the executors: the feature columns go through an Arrow UDF (a pandas UDF before Spark 4.1)
whose Python workers load the model once each (`scoring`), and the model's output columns are appended to the
DataFrame."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd
import pyarrow as pa

from sparkrunner.data import columns
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import outputs
from sparkrunner.ml.driver import checks
from sparkrunner.ml.model_cache import MODELS_CONF, SHARE_CONF, Limits
from sparkrunner.ml.workers.scoring import BatchScorer, ModelSource
from sparkrunner.placement.spark_sessions import is_connect_session

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
    struct = _struct(types)
    scorer = replace(scorer, limits=cache_limits(df.sparkSession))
    frame = df.withColumn(_SCORED, _udf(df, scorer, feature_cols, struct)(*inputs))
    appended = [F.col(f"{_SCORED}.{key}").alias(names[key]) for key in types]
    return frame.select(*[F.col(f"`{c}`") for c in df.columns], *appended)


def cache_limits(spark: Any) -> Limits:
    """How many models (and how much memory) each Python worker keeps, from the session's Spark settings
    (``spark.conf.set`` works too): a clear error before any job when one is wrong."""
    try:
        return Limits.parse(spark.conf.get(MODELS_CONF, None), spark.conf.get(SHARE_CONF, None), "conf")
    except ValueError as e:
        raise InvalidArgumentError(str(e)) from None


def _struct(types: dict[str, Any]) -> Any:
    """The UDF's return type: a ``StructType`` object (Spark Connect parses a DDL string through a classic
    session, which a client built by ``pyspark.sql.connect`` alone lacks: SESSION_OR_CONTEXT_NOT_EXISTS)."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(key, kind) for key, kind in types.items()])


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


def _udf(df: Any, scorer: BatchScorer, feature_cols: Sequence[str], struct: Any) -> Any:
    """An iterator-of-batches UDF of `df`'s kind of session, nondeterministic: Spark keeps it in a projection of
    its own, so one call per row feeds every output column. An Arrow UDF where Spark has them (4.1 on): the
    feature arrays reach the model and the outputs leave it without pandas (2x the rows/s of a pandas UDF that
    does nothing but convert, bench/inference.py's 64 floats a row); a pandas UDF before."""
    arrow = _has_arrow_udfs()
    body = _body(scorer, feature_cols, arrow)
    if is_connect_session(df):  # built directly: a process with a classic session too would get a classic one
        from pyspark.sql.connect.udf import UserDefinedFunction
        from pyspark.sql.pandas.functions import PandasUDFType

        eval_type = _arrow_iter_eval_type() if arrow else PandasUDFType.SCALAR_ITER
        return UserDefinedFunction(body, struct, evalType=eval_type, deterministic=False)
    F = _functions(df)
    return (F.arrow_udf if arrow else F.pandas_udf)(body, struct).asNondeterministic()


def _has_arrow_udfs() -> bool:
    from pyspark.sql import functions

    return hasattr(functions, "arrow_udf")


def _arrow_iter_eval_type() -> int:
    from pyspark.util import PythonEvalType

    return int(PythonEvalType.SQL_SCALAR_ARROW_ITER_UDF)


def _body(scorer: BatchScorer, feature_cols: Sequence[str], arrow: bool) -> Any:
    """The UDF's function, typed as Spark infers an iterator-of-batches UDF from."""
    names = tuple(feature_cols)
    if arrow and len(names) == 1:

        def one_array(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
            return scorer.arrow(batches, names)

        return one_array
    if arrow:

        def several_arrays(batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
            return scorer.arrow(batches, names)

        return several_arrays
    if len(names) == 1:

        def one(batches: Iterator[pd.Series]) -> Iterator[pd.DataFrame]:
            return scorer.pandas(batches)

        return one

    def several(batches: Iterator[tuple[pd.Series, ...]]) -> Iterator[pd.DataFrame]:
        return scorer.pandas(batches)

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
