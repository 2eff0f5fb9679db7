"""Spark DataFrame -> Parquet files written by pyarrow inside the Spark tasks, to any URI pyarrow can open.

No Hadoop connector (hadoop-aws, gcs-connector...) is needed: each task writes its partition's Arrow batches
itself and reports what it wrote; the driver then writes the manifest that makes the write complete. Files of
task attempts that lost (retries, speculation) are not in the manifest, so readers never see them.
"""

from __future__ import annotations

import json
import posixpath
import socket
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sparkrunner.common import storage
from sparkrunner.data import shared_storage
from sparkrunner.data.dataset import MANIFEST, DataFile, path_in
from sparkrunner.data.driver.write_progress import WriteProgress

_REPORT_SCHEMA = "name string, size long, num_rows long, host string"


@dataclass(frozen=True)
class WriteOptions:
    row_group_bytes: int
    max_rows_per_file: int


def write(
    frame: Any,
    root: storage.Location,
    storage_options: Mapping[str, Any],
    options: WriteOptions,
    progress: WriteProgress,
) -> list[DataFile]:
    """Write `frame` under `root` and then its manifest; returns the files, sorted by name."""
    import pyarrow.fs as pafs

    write_id = uuid.uuid4().hex[:8]
    root.filesystem.create_dir(root.path, recursive=True)
    task = _partition_writer(root.uri, dict(storage_options), options, write_id, progress.accumulator)
    with progress:
        reports = frame.mapInArrow(task, _REPORT_SCHEMA).collect()
        files = progress.files = sorted(
            (DataFile(r.name, r.size, r.num_rows) for r in reports), key=lambda f: f.name
        )
    hosts = sorted({r.host for r in reports})
    if root.is_local:
        infos = root.filesystem.get_file_info([path_in(root, f.name) for f in files])
        missing = [f.name for f, info in zip(files, infos, strict=True) if info.type != pafs.FileType.File]
        shared_storage.check_writers_shared(root.uri, hosts, missing)
    if not files:  # every partition was empty: one empty file still carries the schema
        files = [_write_empty(frame, root, write_id)]
    _remove_strays(root, write_id, {file.name for file in files})
    write_manifest(root, files, hosts)
    return files


def _partition_writer(
    uri: str, storage_options: dict[str, Any], options: WriteOptions, write_id: str, accumulator: Any
) -> Any:
    """The function each task runs on its partition's Arrow batches (shipped to executors by Spark)."""

    def write_partition(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        partition, attempt = (context.partitionId(), context.attemptNumber()) if context else (0, 0)
        prefix = f"part-{partition:05d}-{write_id}-a{attempt}"
        root = storage.resolve(uri, storage_options)
        root.filesystem.create_dir(root.path, recursive=True)  # a host that does not share the driver's disk
        written = _write_batches(root, prefix, batches, options)
        if accumulator is not None:  # none on Spark Connect
            accumulator.add((1, len(written), sum(f.num_rows for f in written), sum(f.size for f in written)))
        host = socket.gethostname()
        yield pa.RecordBatch.from_pylist(
            [{"name": f.name, "size": f.size, "num_rows": f.num_rows, "host": host} for f in written],
            schema=pa.schema(
                [("name", pa.string()), ("size", pa.int64()), ("num_rows", pa.int64()), ("host", pa.string())]
            ),
        )

    return write_partition


def _write_batches(
    root: storage.Location, prefix: str, batches: Iterator[Any], options: WriteOptions
) -> list[DataFile]:
    """Row groups of about `row_group_bytes` (as Arrow data), files of at most `max_rows_per_file` rows."""
    import pyarrow as pa

    written: list[DataFile] = []
    pending: list[Any] = []
    pending_rows = 0
    group_rows = 0
    file = _RollingFile(root, prefix, options.max_rows_per_file, written)
    for batch in batches:
        if not batch.num_rows:
            continue
        if not group_rows:  # sized from the first batch: Spark's rows are all of one schema
            group_rows = max(1, options.row_group_bytes * batch.num_rows // max(1, batch.nbytes))
        pending.append(batch)
        pending_rows += batch.num_rows
        while pending_rows >= group_rows:
            table = pa.Table.from_batches(pending)
            file.write(table.slice(0, group_rows))
            rest = table.slice(group_rows)
            pending, pending_rows = rest.to_batches(), rest.num_rows
    if pending_rows:
        file.write(pa.Table.from_batches(pending))
    file.close()
    return written


class _RollingFile:
    """Parquet files named prefix-NNN.parquet, a new one whenever the current one holds `max_rows` rows."""

    def __init__(self, root: storage.Location, prefix: str, max_rows: int, written: list[DataFile]) -> None:
        self.root, self.prefix, self.max_rows, self.written = root, prefix, max_rows, written
        self.writer: Any = None
        self.name = ""
        self.rows = 0

    def write(self, table: Any) -> None:
        """Write `table` as one row group, split across files at `max_rows`."""
        while table.num_rows:
            if self.writer is None:
                self._open(table.schema)
            room = self.max_rows - self.rows
            piece = table.slice(0, room)
            self.writer.write_table(piece, row_group_size=piece.num_rows)
            self.rows += piece.num_rows
            table = table.slice(room)
            if self.rows >= self.max_rows:
                self.close()

    def _open(self, schema: Any) -> None:
        import pyarrow.parquet as pq

        self.name = f"{self.prefix}-{len(self.written):03d}.parquet"
        self.stream = self.root.filesystem.open_output_stream(posixpath.join(self.root.path, self.name))
        self.writer = pq.ParquetWriter(self.stream, schema)
        self.rows = 0

    def close(self) -> None:
        if self.writer is None:
            return
        self.writer.close()
        size = self.stream.tell()
        self.stream.close()
        self.written.append(DataFile(self.name, size, self.rows))
        self.writer = None


def _write_empty(frame: Any, root: storage.Location, write_id: str) -> DataFile:
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(frame.schema)
    name = f"part-empty-{write_id}.parquet"
    with root.filesystem.open_output_stream(posixpath.join(root.path, name)) as stream:
        pq.ParquetWriter(stream, schema).close()
        size = stream.tell()
    return DataFile(name, size, 0)


def _remove_strays(root: storage.Location, write_id: str, kept: set[str]) -> None:
    """Delete files of this write's failed or duplicate task attempts (the manifest would ignore them anyway)."""
    import pyarrow.fs as pafs

    for info in root.filesystem.get_file_info(pafs.FileSelector(root.path)):
        name = posixpath.basename(info.path)
        if write_id in name and name not in kept:
            root.filesystem.delete_file(info.path)


def write_manifest(root: storage.Location, files: list[DataFile], hosts: list[str]) -> None:
    """The manifest, written under a temporary name then moved into place, so it is there whole or not at all."""
    manifest = {
        "files": [{"name": f.name, "size": f.size, "num_rows": f.num_rows} for f in files],
        "num_rows": sum(f.num_rows for f in files),
        "written_on": hosts,
    }
    final = posixpath.join(root.path, MANIFEST)
    staging = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
    with root.filesystem.open_output_stream(staging) as stream:
        stream.write(json.dumps(manifest, indent=1).encode())
    root.filesystem.move(staging, final)
