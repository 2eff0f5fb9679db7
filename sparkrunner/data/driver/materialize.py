"""Spark DataFrame -> Parquet, written once into a cache keyed by the whole query plan, inputs and write options."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from sparkrunner.common import storage
from sparkrunner.common.checks import check_number
from sparkrunner.data import columns
from sparkrunner.data.dataset import ParquetData, read_manifest, scan
from sparkrunner.data.driver import cache_leases, cache_store, host_check
from sparkrunner.data.driver.cache_key import cache_key
from sparkrunner.data.driver.cache_store import CACHE_ENV, default_cache_dir
from sparkrunner.data.driver.write_progress import WriteProgress
from sparkrunner.data.driver.writer import WriteOptions, write
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.log_handler import install_default_handler
from sparkrunner.placement.spark_sessions import is_connect_session

__all__ = ["CACHE_ENV", "default_cache_dir", "materialize"]


def materialize(
    source: Any,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    float32: bool = True,
    vectors_to_arrays: bool = True,
    row_group_bytes: int = 32 * 2**20,
    max_rows_per_file: int = 1_000_000,
    progress: bool = True,
    cache_max_bytes: int | None = None,
) -> ParquetData:
    """A dataset handle for the ranks: a Spark DataFrame written once as Parquet, or an existing Parquet dataset.

    The DataFrame is written under `cache_dir` - a local path, a shared mount (/dbfs, /Volumes, NFS) or a URI
    (s3://, gs://, abfss://, hdfs://, dbfs:/) that every rank can read - in a folder named after its whole query
    plan, its input files and these options, so the same data is written only once; ``handle.delete()``
    removes it. The Spark tasks write the files with pyarrow (no Hadoop connector needed). `storage_options`
    are keyword arguments of the pyarrow filesystem (endpoint, credentials), else the usual environment is
    used. ``float32`` casts double columns (and arrays of doubles) to float; ``vectors_to_arrays`` turns ML
    Vector columns into arrays. Columns no framework can take raise UnsupportedColumnError first. An existing
    Parquet path or URI is used as it is (no copy, no conversion). ``progress`` logs what is being written.
    ``cache_max_bytes`` (default $SPARKRUNNER_CACHE_MAX_BYTES, else no limit) bounds the cache folder: least
    recently used entries go first, never one a live process holds (this one is held while the handle lives).
    """
    install_default_handler()
    if isinstance(source, (str, os.PathLike)):
        return scan(os.fspath(source), storage_options)
    if not hasattr(source, "write") or not hasattr(source, "schema"):
        raise InvalidArgumentError(
            f"materialize takes a Spark DataFrame or a Parquet path, not a {type(source).__name__}"
        )
    for name, value in (("row_group_bytes", row_group_bytes), ("max_rows_per_file", max_rows_per_file)):
        check_number(name, value, 1)
    limit = cache_store.max_bytes(cache_max_bytes)
    columns.check_spark_schema(source.schema, vectors_to_arrays)
    frame = converted(source, float32)
    options = WriteOptions(row_group_bytes, max_rows_per_file)
    cache = storage.resolve(cache_dir or default_cache_dir(), storage_options)
    key = cache_key(frame, dataclasses.asdict(options))
    lease = cache_leases.take(cache, key)  # before reading: no eviction can remove it from now on
    try:
        data = _written(frame, cache.child(key), storage_options, options, progress)
    except BaseException:
        cache_leases.release(cache.filesystem, lease.path)
        raise
    cache_leases.hold_while_alive(data, cache, lease)
    cache_store.stamp(cache, key)
    if limit is not None:
        cache_store.evict(cache, limit)
    return data


def _written(
    frame: Any,
    root: storage.Location,
    storage_options: Mapping[str, Any] | None,
    options: WriteOptions,
    progress: bool,
) -> ParquetData:
    """The entry at `root`, written first unless a complete write is there."""
    if read_manifest(root) is None:
        report = WriteProgress(frame.sparkSession, root.uri, progress)
        write(frame, root, storage_options or {}, options, report)
    data = scan(root.uri, storage_options)
    host_check.check_hosts_see(frame.sparkSession, data)
    return data


def converted(frame: Any, float32: bool) -> Any:
    """Vectors to arrays, and doubles to floats when asked, keeping the column order."""
    if is_connect_session(frame):  # the classic functions build classic columns when both kinds are loaded
        from pyspark.ml.connect.functions import vector_to_array
        from pyspark.sql.connect import functions as F
    else:
        from pyspark.ml.functions import vector_to_array
        from pyspark.sql import functions as F  # type: ignore[no-redef]

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
