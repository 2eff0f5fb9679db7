"""The materialize cache across Spark applications for a Spark ML pipeline over Parquet files: a second
application (tests/programs/ml_cache_session.py) that fits the same pipeline on the same files gets this
application's entry without writing a file of it, and a pipeline with StandardScaler's withMean flipped gets a
new entry holding that pipeline's output (the oracle: this application computes it itself)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from sparkrunner.data import materialize
from tests.data.driver.test_cache_ml import _values, entries_on_disk, source, stages
from tests.helpers import run_driver

pytestmark = pytest.mark.spark


def pipelined(spark: Any, folder: str, *, with_mean: bool) -> Any:
    """test_cache_ml's pipeline, fitted on the Parquet files in `folder`, applied to them."""
    from pyspark.ml import Pipeline

    frame = spark.read.parquet(folder)
    chosen = stages()
    chosen[1].setWithMean(with_mean)
    return Pipeline(stages=chosen).fit(frame).transform(frame).drop("s")


def parquet_files(cache: Path) -> dict[str, tuple[int, int, int]]:
    """Every Parquet file in the cache folder, with its inode, modification time and size."""
    return {
        str(path): (path.stat().st_ino, path.stat().st_mtime_ns, path.stat().st_size)
        for path in cache.rglob("*.parquet")
    }


def _line(out: str, prefix: str) -> str:
    found = [line for line in out.splitlines() if line.startswith(prefix + " ")]
    assert found, f"no {prefix!r} line in:\n{out}"
    return found[0][len(prefix) + 1 :]


def test_another_application_reuses_the_pipeline_entry_and_a_changed_scaler_misses(
    spark_local: Any, tmp_path: Path
) -> None:
    folder, cache = str(source(tmp_path)), tmp_path / "cache"
    first = materialize(pipelined(spark_local, folder, with_mean=True), cache, progress=False)
    before = parquet_files(cache)
    assert before, "the first application wrote no Parquet"

    out = run_driver("ml_cache_session", folder, str(cache), seconds=300)
    assert _line(out, "SAME") == first.uri, f"the second application missed:\n{out}"
    other = _line(out, "OTHER")
    assert other != first.uri, "a scaler with withMean flipped reused the entry"
    after = parquet_files(cache)
    assert {path: after.get(path) for path in before} == before, "the first entry's files were rewritten"
    assert {path for path in after if path not in before} == {str(p) for p in Path(other).rglob("*.parquet")}
    assert entries_on_disk(cache) == {Path(first.uri).name, Path(other).name}

    expected = {
        row["id"]: _values(row["scaled"])
        for row in pipelined(spark_local, folder, with_mean=False).select("id", "scaled").collect()
    }
    read_back = pq.read_table(other, columns=["id", "scaled"]).to_pylist()
    assert sorted(row["id"] for row in read_back) == sorted(expected)
    for row in read_back:
        np.testing.assert_allclose(row["scaled"], expected[row["id"]], rtol=1e-6)
