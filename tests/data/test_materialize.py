"""Materialize with a real SparkSession: cached Parquet keyed by plan and options, conversions, typed errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparkrunner.data import NumpyLoader, materialize
from sparkrunner.data.dataset import MANIFEST
from sparkrunner.errors import InvalidArgumentError, UnsupportedColumnError

pytestmark = pytest.mark.spark


def frame(spark: Any, rows: int = 200) -> Any:
    from pyspark.sql import functions as F

    return spark.range(rows).select("id", (F.col("id") * 0.5).alias("w"), (F.col("id") % 3).alias("label"))


def test_writes_once_and_reuses_across_runs(spark_local: Any, tmp_path: Path) -> None:
    first = materialize(frame(spark_local), tmp_path)
    stamp = os.stat(Path(first.uri) / MANIFEST).st_mtime_ns
    again = materialize(frame(spark_local), tmp_path)  # a new DataFrame object, the same query
    assert again.uri == first.uri and os.stat(Path(again.uri) / MANIFEST).st_mtime_ns == stamp
    assert first.num_rows == 200 and first.column_names == ("id", "w", "label")
    other_rows = materialize(frame(spark_local, rows=201), tmp_path)
    other_options = materialize(frame(spark_local), tmp_path, float32=False)
    assert len({first.uri, other_rows.uri, other_options.uri}) == 3
    first.delete()
    assert not os.path.exists(first.uri)
    assert materialize(frame(spark_local), tmp_path).num_rows == 200  # written again after delete


def test_local_data_with_the_same_schema_is_not_confused(spark_local: Any, tmp_path: Path) -> None:
    a = materialize(spark_local.createDataFrame([(1, 2.0), (3, 4.0)], ["k", "v"]), tmp_path)
    b = materialize(spark_local.createDataFrame([(5, 6.0), (7, 8.0)], ["k", "v"]), tmp_path)
    assert a.uri != b.uri
    assert sorted(np.concatenate([batch["k"] for batch in NumpyLoader(b, 1, world_size=1, rank=0)])) == [5, 7]


def test_converts_doubles_and_vectors_to_float32_arrays(spark_local: Any, tmp_path: Path) -> None:
    from pyspark.ml.linalg import Vectors

    rows = [(Vectors.dense([float(i), 1.0, 2.0]), float(i), [float(i), 0.5], i) for i in range(8)]
    df = spark_local.createDataFrame(rows, ["features", "weight", "pair", "label"])
    data = materialize(df, tmp_path)
    shapes = {c.name: (c.dtype, c.shape) for c in data.columns}
    assert shapes == {
        "features": ("float32", (3,)),
        "weight": ("float32", ()),
        "pair": ("float32", (2,)),
        "label": ("int64", ()),
    }
    batch = next(iter(NumpyLoader(data, 8, rank=0, world_size=1, shuffle=False)))
    np.testing.assert_array_equal(batch["features"][:, 0], batch["weight"])
    kept = materialize(df, tmp_path, float32=False)
    assert {c.name: c.dtype for c in kept.columns}["features"] == "float64"


def test_unsupported_columns_fail_before_writing(spark_local: Any, tmp_path: Path) -> None:
    from pyspark.ml.linalg import Vectors
    from pyspark.sql import functions as F

    df = spark_local.range(4).select(
        "id",
        F.col("id").cast("string").alias("name"),
        F.current_date().alias("day"),
        F.lit(1.5).cast("decimal(4,2)").alias("price"),
    )
    with pytest.raises(UnsupportedColumnError) as caught:
        materialize(df, tmp_path)
    message = str(caught.value)
    assert "'name'" in message and "StringIndexer" in message and "'day'" in message and "'price'" in message
    assert "'id'" not in message
    vectors = spark_local.createDataFrame([(Vectors.dense([1.0]),)], ["v"])
    with pytest.raises(UnsupportedColumnError, match="vectors_to_arrays=True"):
        materialize(vectors, tmp_path, vectors_to_arrays=False)
    assert list(tmp_path.iterdir()) == []


def test_small_files_give_row_groups_for_every_rank(spark_local: Any, tmp_path: Path) -> None:
    data = materialize(frame(spark_local, rows=1000).coalesce(1), tmp_path, max_rows_per_file=100)
    assert len(data.row_groups) == 10 and data.num_rows == 1000
    with pytest.raises(InvalidArgumentError):
        materialize(frame(spark_local), tmp_path, max_rows_per_file=0)


def test_an_existing_parquet_path_is_used_as_it_is(spark_local: Any, tmp_path: Path) -> None:
    frame(spark_local).write.parquet(str(tmp_path / "given"))
    data = materialize(tmp_path / "given")
    assert data.uri == str(tmp_path / "given") and data.num_rows == 200
    with pytest.raises(InvalidArgumentError, match="DataFrame or a Parquet path"):
        materialize(42)


def _column(data: Any, name: str) -> np.ndarray:
    loader = NumpyLoader(data, data.num_rows, rank=0, world_size=1, shuffle=False, columns=[name])
    return np.concatenate([batch[name] for batch in loader])


def test_wide_frames_that_differ_past_the_printed_columns_are_not_confused(
    spark_local: Any, tmp_path: Path
) -> None:
    """Spark prints 25 fields of a plan; a change in the 30th column must still be another cache entry."""
    from pyspark.sql import functions as F

    def wide(last: Any) -> Any:
        columns = [(F.col("id") + i).alias(f"c{i}") for i in range(29)]
        return spark_local.range(6).select(*columns, last.alias("c29"))

    plain = materialize(wide(F.col("id") + 29), tmp_path)
    doubled = materialize(wide(F.col("id") * 2), tmp_path)
    assert plain.uri != doubled.uri
    np.testing.assert_array_equal(np.sort(_column(plain, "c29")), np.arange(6) + 29)
    np.testing.assert_array_equal(np.sort(_column(doubled, "c29")), np.arange(6) * 2)


def test_a_changed_udf_body_is_another_cache_entry(spark_local: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    def scaled(factor: int) -> Any:
        def transform(value):  # type: ignore[no-untyped-def]  # the same name each time, another body
            return value * factor

        return spark_local.range(5).select(F.udf(transform, "long")("id").alias("v"))

    tens = materialize(scaled(10), tmp_path)
    hundreds = materialize(scaled(100), tmp_path)
    assert tens.uri != hundreds.uri
    np.testing.assert_array_equal(np.sort(_column(hundreds, "v")), np.arange(5) * 100)


def test_a_rewritten_input_file_is_another_cache_entry(spark_local: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "source"
    source.mkdir()
    pq.write_table(pa.table({"v": np.arange(8)}), source / "part-0.parquet")
    before = materialize(spark_local.read.parquet(str(source)), tmp_path / "cache")
    pq.write_table(pa.table({"v": np.arange(8) + 50}), source / "part-0.parquet")  # same name, same size
    after = materialize(spark_local.read.parquet(str(source)), tmp_path / "cache")
    assert before.uri != after.uri
    np.testing.assert_array_equal(np.sort(_column(after, "v")), np.arange(8) + 50)


def test_only_identifiable_plans_are_shared_across_sessions(spark_local: Any, tmp_path: Path) -> None:
    """Files and ranges can be named in a new session; UDFs, local data and random numbers cannot."""
    from pyspark.sql import functions as F

    from sparkrunner.data.cache_key import cache_description

    frame(spark_local).write.parquet(str(tmp_path / "given"))
    shared = [frame(spark_local), spark_local.read.parquet(str(tmp_path / "given")).select("id")]
    session_only = [
        spark_local.range(3).select(F.udf(lambda v: v, "long")("id")),
        spark_local.createDataFrame([(1,)], ["k"]),
        spark_local.range(3).select(F.rand(seed=1).alias("r")),
    ]
    for query in shared:
        assert "session" not in cache_description(query, {}), query
    for query in session_only:
        assert "session" in cache_description(query, {}), query
