"""Driver side of "shared or refused": before ranks on other hosts read a dataset on a local path, one small
Spark task per slot counts the rows its host can open (`sparkrunner.data.shared_storage` holds the rank's own check)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

from sparkrunner.data.dataset import ParquetData, path_in
from sparkrunner.data.shared_storage import ADVICE
from sparkrunner.errors import DataNotSharedError
from sparkrunner.placement.slots import session_slots


def check_hosts_see(spark: Any, data: ParquetData) -> None:
    """Run one small Spark task per task slot; each counts the rows it can open. Only for local paths on a
    cluster (local masters share the driver's disk, object stores are shared by nature)."""
    master = str(spark.conf.get("spark.master", "local"))
    if master.startswith("local") or not data.location().is_local:
        return
    slots = session_slots(spark) or int(spark.conf.get("spark.default.parallelism", "2") or 2)
    counted = spark.range(0, slots, 1, slots).mapInArrow(_rows_seen(data), "host string, rows long")
    short = sorted({(row.host, row.rows) for row in counted.collect() if row.rows != data.num_rows})
    if short:
        views = "; ".join(f"{host} sees {rows:,} rows" for host, rows in short)
        raise DataNotSharedError(
            f"{data.uri} holds {data.num_rows:,} rows as the driver sees it, but {views}. {ADVICE}"
        )


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
