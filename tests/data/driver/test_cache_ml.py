"""The materialize cache and Spark ML transformers (JVM UDFs), with a real `local[2]` SparkSession and real
Parquet: the same transformer reuses its entry (counted on disk here), a model fitted on other data is
another entry whose data is that model's output, and non-deterministic plans are never reused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkrunner.data import materialize
from sparkrunner.data.dataset import MANIFEST
from sparkrunner.data.driver.cache_key import cache_description

pytestmark = pytest.mark.spark

ROWS = 60


def entries_on_disk(cache: Path) -> set[str]:
    """The complete entries of a cache folder, found by looking at the folder."""
    return {path.parent.name for path in cache.glob(f"*/{MANIFEST}")}


def source(tmp_path: Path) -> Path:
    """Parquet input files: the first half of the rows has 3 categories, the second half 5."""
    ids = np.arange(ROWS)
    categories = np.where(ids < ROWS // 2, ids % 3, ids % 5)
    folder = tmp_path / "source"
    folder.mkdir()
    table = pa.table(
        {"id": ids, "a": ids * 0.5 + (ids % 7), "s": [f"c{c}" for c in categories], "cat": categories}
    )
    pq.write_table(table, folder / "part-0.parquet")
    return folder


def stages() -> list[Any]:
    from pyspark.ml.feature import OneHotEncoder, StandardScaler, StringIndexer, VectorAssembler

    return [
        VectorAssembler(inputCols=["a", "id"], outputCol="f"),
        StandardScaler(inputCol="f", outputCol="scaled", withMean=True),
        StringIndexer(inputCol="s", outputCol="index", handleInvalid="keep"),
        OneHotEncoder(inputCols=["index"], outputCols=["onehot"], handleInvalid="keep"),
    ]


def fitted(frame: Any) -> Any:
    from pyspark.ml import Pipeline

    return Pipeline(stages=stages()).fit(frame)


def test_a_spark_ml_transformer_is_written_once(spark_local: Any, tmp_path: Path) -> None:
    """The whole pipeline (a VectorAssembler and the models of a StandardScaler, a StringIndexer and a
    OneHotEncoder), fitted again with new stage objects for its second entry lookup: a stage whose key changed
    from one fit or object to the next would miss here too, since the plan holds every stage. Each stage's
    output column is read back."""
    frame = spark_local.read.parquet(str(source(tmp_path)))

    def make() -> Any:
        return fitted(frame).transform(frame).drop("s")

    cache = tmp_path / "cache"
    first = make()
    uris = {materialize(first, cache).uri, materialize(first, cache).uri, materialize(make(), cache).uri}
    assert len(uris) == 1 and len(entries_on_disk(cache)) == 1
    assert not {"session", "call"} & set(cache_description(make(), {}))  # a new session would reuse it too
    by_id = {row["id"]: row for row in first.collect()}
    read_back = pq.read_table(uris.pop()).to_pylist()
    assert len(read_back) == ROWS
    for column in ("f", "scaled", "index", "onehot"):
        for row in read_back:
            np.testing.assert_allclose(np.ravel(row[column]), _values(by_id[row["id"]][column]), rtol=1e-6)


def estimators(name: str, frame: Any) -> tuple[Any, Callable[[], Any]]:
    """The input to fit and transform, and a new estimator, for each fitted stage (the whole pipeline's plan is
    theirs chained, so a pipeline of models fitted on other data differs by as much as they do)."""
    from pyspark.ml.feature import OneHotEncoder, StandardScaler, StringIndexer, VectorAssembler

    assembled = VectorAssembler(inputCols=["a", "id"], outputCol="f").transform(frame)
    return {
        "StandardScalerModel": (
            assembled,
            lambda: StandardScaler(inputCol="f", outputCol="g", withMean=True),
        ),
        "StringIndexerModel": (
            frame,
            lambda: StringIndexer(inputCol="s", outputCol="i", handleInvalid="keep"),
        ),
        "OneHotEncoderModel": (
            frame,
            lambda: OneHotEncoder(inputCols=["cat"], outputCols=["o"], handleInvalid="keep"),
        ),
    }[name]


@pytest.mark.parametrize("name", ["StandardScalerModel", "StringIndexerModel", "OneHotEncoderModel"])
def test_a_model_fitted_on_other_data_is_another_entry(spark_local: Any, tmp_path: Path, name: str) -> None:
    """Fitted on the first or the second half of the rows: other means and stds, label indices, category
    counts; each entry holds its own model's output for every row."""
    given, estimator = estimators(name, spark_local.read.parquet(str(source(tmp_path))))
    half = ROWS // 2
    models = [estimator().fit(given.where(where)) for where in (f"id < {half}", f"id >= {half}")]
    frames = [model.transform(given).drop("s") for model in models]
    cache = tmp_path / "cache"
    written = [materialize(one, cache) for one in frames]
    assert written[0].uri != written[1].uri and len(entries_on_disk(cache)) == 2
    column = frames[1].columns[-1]
    expected = {row["id"]: _values(row[column]) for row in frames[1].collect()}
    assert expected != {row["id"]: _values(row[column]) for row in frames[0].collect()}  # the models differ
    for row in pq.read_table(written[1].uri).to_pylist():
        np.testing.assert_allclose(np.ravel(row[column]), expected[row["id"]], rtol=1e-6)


def test_non_deterministic_plans_are_never_reused(spark_local: Any, tmp_path: Path) -> None:
    """A random input under a VectorAssembler, and a Python UDF marked non-deterministic: a new entry each time."""
    import random

    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    frame = spark_local.read.parquet(str(source(tmp_path)))
    noisy = VectorAssembler(inputCols=["r"], outputCol="f").transform(frame.select(F.rand(seed=3).alias("r")))
    draws = frame.select(F.udf(lambda: random.random(), "double").asNondeterministic()().alias("d"))
    for query, cache in ((noisy, tmp_path / "noisy"), (draws, tmp_path / "draws")):
        assert materialize(query, cache).uri != materialize(query, cache).uri
        assert len(entries_on_disk(cache)) == 2


def test_pandas_data_is_reused_only_inside_the_application(spark_local: Any, tmp_path: Path) -> None:
    import pandas as pd
    from pyspark.ml.feature import VectorAssembler

    local = spark_local.createDataFrame(pd.DataFrame({"a": [1.0, 2.0, 3.0]}))
    other = spark_local.createDataFrame(pd.DataFrame({"a": [7.0, 8.0, 9.0]}))

    def assembled(frame: Any) -> Any:
        return VectorAssembler(inputCols=["a"], outputCol="f").transform(frame)

    cache = tmp_path / "cache"
    same = {materialize(assembled(local), cache).uri for _ in range(2)}
    assert len(same) == 1 and "session" in cache_description(assembled(local), {})
    assert materialize(assembled(other), cache).uri not in same  # the same plan text, other rows
    assert sorted(row["f"][0] for row in pq.read_table(same.pop()).to_pylist()) == [1.0, 2.0, 3.0]


def _values(value: Any) -> list[float]:
    """A Spark ML vector or a number as a list of floats."""
    return [float(v) for v in value.toArray()] if hasattr(value, "toArray") else [float(value)]
