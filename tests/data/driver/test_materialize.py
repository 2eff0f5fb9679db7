"""Materialize with a real SparkSession: cached Parquet keyed by plan and options, conversions, typed errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs
import pytest

from sparkrunner.data import NumpyLoader, materialize
from sparkrunner.data.dataset import MANIFEST
from sparkrunner.errors import InvalidArgumentError, UnsupportedColumnError
from tests.data.s3_server import S3Server

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

    from sparkrunner.data.driver.cache_key import cache_description

    frame(spark_local).write.parquet(str(tmp_path / "given"))
    shared = [frame(spark_local), spark_local.read.parquet(str(tmp_path / "given")).select("id")]
    session_only = [
        spark_local.range(3).select(F.udf(lambda v: v, "long")("id")),
        spark_local.createDataFrame([(1,)], ["k"]),
        spark_local.range(3).select(F.rand(seed=1).alias("r")),
    ]
    for query in shared:
        assert "session" not in cache_description(query, {}), query
    for query in session_only:  # reused only in this application, or never
        assert {"session", "call"} & set(cache_description(query, {})), query


def test_writes_to_an_s3_api_server_without_hadoop_connectors(
    spark_local: Any, s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Spark tasks write through pyarrow: this Spark has no hadoop-aws jar, and s3a:// would fail in it."""
    cache = s3.new_prefix()
    data = materialize(frame(spark_local, rows=300), cache, storage_options=s3.storage_options)
    assert data.uri.startswith(cache + "/") and data.num_rows == 300 and data.num_bytes > 0
    listed = s3.filesystem().get_file_info(pafs.FileSelector(data.uri.removeprefix("s3://")))
    assert sorted(info.base_name for info in listed if info.base_name.endswith(".parquet")) == sorted(
        file.name for file in data.files
    )
    np.testing.assert_array_equal(np.sort(_column(data, "id")), np.arange(300))
    assert "materialized 300 rows" in caplog.text
    again = materialize(frame(spark_local, rows=300), cache, storage_options=s3.storage_options)
    assert again.uri == data.uri and again.files == data.files  # a cache hit: nothing written again


def test_a_rewritten_input_on_s3_is_another_cache_entry(
    spark_local: Any, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Object stores keep modification times to the second: the ETag tells a same-size rewrite apart.

    Stand-in: this Spark has no S3 connector to read s3a:// inputs, so a DataFrame-like object names the file.
    """
    from sparkrunner.data.driver.cache_key import cache_description

    monkeypatch.setenv(
        "AWS_ENDPOINT_URL", s3.endpoint
    )  # input files are looked at with the environment's settings
    source = s3.new_prefix().removeprefix("s3://") + "/part-0.parquet"
    first = cache_description_of_file(s3, source, np.arange(8) + 100, cache_description)
    second = cache_description_of_file(s3, source, np.arange(8) + 200, cache_description)
    assert "session" not in first and first["files"][0][1] == second["files"][0][1]  # same size
    assert first["files"] != second["files"]


def cache_description_of_file(s3: S3Server, path: str, values: np.ndarray, describe: Any) -> Any:
    """Write `values` to `path` on the server and describe a DataFrame over it, as seen from this process."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    plain = {"compression": "none", "use_dictionary": False, "write_statistics": False}  # size set by length
    pq.write_table(pa.table({"v": values}), path, filesystem=s3.filesystem(), **plain)

    class FileFrame:  # what cache_description asks of a DataFrame whose input is this one S3 file
        def __init__(self, spark: Any) -> None:
            self.sparkSession = spark
            self._jdf = spark.range(1)._jdf

        def inputFiles(self) -> list[str]:
            return [f"s3://{path}"]

    return describe(FileFrame(SparkSession.getActiveSession()), {})


def test_file_uris_and_plain_paths_name_the_same_cache(spark_local: Any, tmp_path: Path) -> None:
    plain = materialize(frame(spark_local), tmp_path, progress=False)
    uri = materialize(frame(spark_local), f"file://{tmp_path}", progress=False)
    assert uri.uri == plain.uri and uri.files == plain.files


def test_repr_says_rows_columns_files_size_and_uri(spark_local: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    data = materialize(
        spark_local.range(50).select("id", F.array(F.col("id") * 1.0, F.lit(0.5)).alias("pair")),
        tmp_path,
        max_rows_per_file=20,
        progress=False,
    )
    text = repr(data)
    assert text.startswith("ParquetData(50 rows, 2 columns [id: int64, pair: float32[2]], ")
    assert f"{len(data.files)} files" in text and f"uri={data.uri!r}" in text and "KiB" in text
    assert len(data.files) >= 3  # 50 rows in files of at most 20
