"""Spark DataFrame -> Parquet, written once into a cache keyed by the analyzed query plan and write options."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from sparkrunner.data import columns
from sparkrunner.data.cache_key import cache_key
from sparkrunner.data.dataset import ParquetData, scan
from sparkrunner.errors import InvalidArgumentError

CACHE_ENV = "SPARKRUNNER_DATA_CACHE"


def default_cache_dir() -> str:
    """$SPARKRUNNER_DATA_CACHE, else ~/.cache/sparkrunner-datasets."""
    return os.environ.get(CACHE_ENV) or os.path.join(Path.home(), ".cache", "sparkrunner-datasets")


def materialize(
    source: Any,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    float32: bool = True,
    vectors_to_arrays: bool = True,
    row_group_bytes: int = 32 * 2**20,
    max_rows_per_file: int = 1_000_000,
) -> ParquetData:
    """A dataset handle for the ranks: a Spark DataFrame written once as Parquet, or an existing Parquet path.

    The DataFrame is written under `cache_dir` (which every rank must be able to read: local mode, or a
    shared mount such as /dbfs) in a folder named after its analyzed query plan and these options, so the
    same DataFrame is written only once across runs; ``handle.delete()`` removes it. ``float32`` casts
    double columns (and arrays of doubles) to float; ``vectors_to_arrays`` turns ML Vector columns into
    arrays. Columns no framework can take (strings, dates, maps...) raise UnsupportedColumnError first.
    An existing Parquet path is used as it is (no copy, no conversion).
    """
    if isinstance(source, (str, os.PathLike)):
        return scan(os.fspath(source))
    if not hasattr(source, "write") or not hasattr(source, "schema"):
        raise InvalidArgumentError(
            f"materialize takes a Spark DataFrame or a Parquet path, not a {type(source).__name__}"
        )
    for name, value in (("row_group_bytes", row_group_bytes), ("max_rows_per_file", max_rows_per_file)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"{name} must be an int >= 1, not {value!r}")
    columns.check_spark_schema(source.schema, vectors_to_arrays)
    frame = _converted(source, float32)
    options = {"parquet.block.size": row_group_bytes, "maxRecordsPerFile": max_rows_per_file}
    root = os.path.join(
        os.path.abspath(os.fspath(cache_dir or default_cache_dir())), cache_key(frame, options)
    )
    if not os.path.exists(os.path.join(root, "_SUCCESS")):
        _write(frame, root, options)
    return scan(root)


def _converted(frame: Any, float32: bool) -> Any:
    """Vectors to arrays, and doubles to floats when asked, keeping the column order."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    float_type = "float32" if float32 else "float64"
    selected = []
    for field in frame.schema.fields:
        type_name = columns.spark_type_name(field.dataType)
        column = F.col(f"`{field.name}`")
        if type_name == "vector":
            column = vector_to_array(column, dtype=float_type)
        elif float32 and type_name == "double":
            column = column.cast("float")
        elif float32 and type_name == "array<double>":
            column = column.cast("array<float>")
        selected.append(column.alias(field.name))
    return frame.select(*selected)


def _write(frame: Any, root: str, options: dict[str, int]) -> None:
    """Write next to `root`, then rename into place, so a half-written folder is never mistaken for a cache hit."""
    staging = f"{root}.tmp-{uuid.uuid4().hex[:8]}"
    os.makedirs(os.path.dirname(root), exist_ok=True)
    try:
        writer = frame.write.mode("overwrite")
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.parquet("file://" + staging)
        if not os.path.exists(os.path.join(root, "_SUCCESS")):  # left by an attempt that died halfway
            shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):  # another driver won the race: its copy is as good
            os.rename(staging, root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
