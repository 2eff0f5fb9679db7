"""Shared or refused: a dataset on a machine's own disk must not reach ranks on other hosts as an empty or
partial dataset. Spark tasks (on the cluster's hosts) and each rank compare what they see with the metadata
the driver read; a difference fails with a message that says which location to use instead."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

from sparkrunner.data.dataset import ParquetData, human_bytes, path_in
from sparkrunner.errors import DataNotSharedError
from sparkrunner.sessions import is_connect_session

_ADVICE = (
    "Every host of the run must read the same files: materialize into storage they all share, e.g. "
    "materialize(df, cache_dir='s3://bucket/prefix') (or gs://, abfss://, hdfs://, dbfs:/, /Volumes/...), or a "
    "mount every host has (NFS, /dbfs); set it for all runs with SPARKRUNNER_DATA_CACHE."
)


def check_writers_shared(data_uri: str, written_on: list[str], missing: list[str]) -> None:
    """After a write: files the tasks wrote that the driver cannot see mean a per-host disk."""
    if missing:
        raise DataNotSharedError(
            f"{data_uri} is not shared: Spark tasks on {', '.join(written_on)} wrote {len(missing)} files there "
            f"that this driver ({socket.gethostname()}) cannot see (e.g. {missing[0]}). {_ADVICE}"
        )


def check_hosts_see(spark: Any, data: ParquetData) -> None:
    """Run one small Spark task per task slot; each counts the rows it can open. Only for local paths on a
    cluster (local masters share the driver's disk, object stores are shared by nature)."""
    master = str(spark.conf.get("spark.master", "local"))
    if master.startswith("local") or not data.location().is_local:
        return
    slots = _task_slots(spark)
    counted = spark.range(0, slots, 1, slots).mapInArrow(_rows_seen(data), "host string, rows long")
    short = sorted({(row.host, row.rows) for row in counted.collect() if row.rows != data.num_rows})
    if short:
        views = "; ".join(f"{host} sees {rows:,} rows" for host, rows in short)
        raise DataNotSharedError(
            f"{data.uri} holds {data.num_rows:,} rows as the driver sees it, but {views}. {_ADVICE}"
        )


def _task_slots(spark: Any) -> int:
    """The cluster's task slots; over Spark Connect what the master's name or spark.default.parallelism says."""
    if is_connect_session(spark):
        from sparkrunner.placement.connect import connect_slots

        return connect_slots(spark) or int(spark.conf.get("spark.default.parallelism", "2") or 2)
    return max(1, int(spark.sparkContext.defaultParallelism))


def _rows_seen(data: ParquetData) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The mapInArrow function: this host's name and how many of the dataset's rows it can open."""

    def count(_: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        root, rows = data.location(), 0
        for file in data.files:
            try:
                with root.filesystem.open_input_file(path_in(root, file.name)) as opened:
                    rows += pq.ParquetFile(opened).metadata.num_rows
            except OSError:
                continue
        yield pa.RecordBatch.from_pylist([{"host": socket.gethostname(), "rows": rows}])

    return count


def check_rank_sees(data: ParquetData, rank: int) -> None:
    """On a rank, before reading: the files of a local-path dataset are there, at the sizes the driver saw."""
    import pyarrow.fs as pafs

    root = data.location()
    if not root.is_local:
        return
    infos = root.filesystem.get_file_info([path_in(root, file.name) for file in data.files])
    wrong = [
        file.name
        for file, info in zip(data.files, infos, strict=True)
        if info.type != pafs.FileType.File or info.size != file.size
    ]
    if wrong:
        raise DataNotSharedError(
            f"rank {rank} on {socket.gethostname()} cannot read {len(wrong)} of the {len(data.files)} files "
            f"({human_bytes(data.num_bytes)}) of {data.uri} that the driver read (e.g. {wrong[0]!r}). {_ADVICE}"
        )
