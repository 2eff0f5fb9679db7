"""The dataset handle passed to the ranks: a Parquet dataset's URI plus the global metadata every rank plans from."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sparkrunner.common import storage
from sparkrunner.data import columns
from sparkrunner.errors import InvalidArgumentError

# Written last by materialize: the files of one complete write (others in the folder are ignored).
MANIFEST = "_sparkrunner_manifest.json"
_FOOTER_THREADS = 8


@dataclass(frozen=True)
class DataFile:
    """One Parquet file: path relative to the dataset root ("" when the dataset is a single file)."""

    name: str
    size: int
    num_rows: int


@dataclass(frozen=True)
class RowGroup:
    """One Parquet row group: the unit both readers read (and Petastorm shards by)."""

    file: str  # path relative to the dataset root
    index: int
    num_rows: int


@dataclass(frozen=True, repr=False)
class ParquetData:
    """A materialized dataset: where it is, its columns, files and row groups, read once on the driver.

    Small and picklable: pass it to ``Runner.run`` as an argument; ranks plan their shards from this
    metadata alone, so every rank computes the same plan without reading any footer. `uri` is a local
    path or a URI (s3://, gs://, abfss://, hdfs://, dbfs:/...); `storage_options` go to its filesystem.
    """

    uri: str
    columns: tuple[columns.Column, ...]
    row_groups: tuple[RowGroup, ...]
    files: tuple[DataFile, ...] = ()
    storage_options: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def path(self) -> str:
        """The same as `uri` (its name before `uri`)."""
        return self.uri

    @property
    def num_rows(self) -> int:
        return sum(group.num_rows for group in self.row_groups)

    @property
    def num_bytes(self) -> int:
        return sum(file.size for file in self.files)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def location(self) -> storage.Location:
        """The filesystem and root path of the dataset (built where it is called: driver or rank)."""
        return storage.resolve(self.uri, self.storage_options)

    def delete(self) -> None:
        """Remove the Parquet files (for example a cached materialization no longer needed)."""
        import pyarrow.fs as pafs

        root = self.location()
        if root.filesystem.get_file_info(root.path).type == pafs.FileType.Directory:
            root.filesystem.delete_dir(root.path)

    def __repr__(self) -> str:
        shown = ", ".join(f"{c.name}: {c.dtype}{list(c.shape) if c.shape else ''}" for c in self.columns)
        return (
            f"ParquetData({self.num_rows:,} rows, {len(self.columns)} columns [{shown}], "
            f"{len(self.files)} files, {len(self.row_groups)} row groups, {human_bytes(self.num_bytes)}, "
            f"uri={self.uri!r})"
        )


def path_in(root: storage.Location, name: str) -> str:
    """The path on `root`'s filesystem of the file `name` (a RowGroup's or DataFile's; "" is the root itself)."""
    return posixpath.join(root.path, name) if name else root.path


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def scan(uri: str, storage_options: Mapping[str, Any] | None = None) -> ParquetData:
    """Read the footers of the Parquet dataset at `uri` (a directory, or one file)."""
    import pyarrow.fs as pafs

    root = storage.resolve(uri, storage_options)
    kind = root.filesystem.get_file_info(root.path).type
    if kind == pafs.FileType.NotFound:
        raise InvalidArgumentError(f"there is no Parquet dataset at {root.uri}")
    names = _file_names(root) if kind == pafs.FileType.Directory else [""]
    if not names:
        raise InvalidArgumentError(f"{root.uri} holds no Parquet files")
    with ThreadPoolExecutor(min(_FOOTER_THREADS, len(names))) as pool:  # object stores: one request each
        footers = list(pool.map(lambda name: _footer(root, name), names))
    files, row_groups = [], []
    for name, (size, meta) in zip(names, footers, strict=True):
        files.append(DataFile(name, size, meta.num_rows))
        # empty row groups stay: Petastorm counts them when it deals row groups out to shards
        row_groups += [RowGroup(name, i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
    schema = footers[0][1].schema.to_arrow_schema()
    return ParquetData(
        root.uri,
        columns.from_arrow(schema, _first_rows(root, row_groups)),
        tuple(row_groups),
        tuple(files),
        dict(storage_options or {}),
    )


def _file_names(root: storage.Location) -> list[str]:
    """The manifest's files where materialize wrote one, else every Parquet file below the root."""
    import pyarrow.dataset as pads

    manifest = read_manifest(root)
    if manifest is not None:
        return [entry["name"] for entry in manifest["files"]]
    found = pads.dataset(root.path, filesystem=root.filesystem, format="parquet")
    return sorted(posixpath.relpath(path, root.path) for path in found.files)


def read_manifest(root: storage.Location) -> dict[str, Any] | None:
    """The manifest of a complete materialize write at `root`, or None."""
    import pyarrow as pa

    try:
        with root.filesystem.open_input_stream(posixpath.join(root.path, MANIFEST)) as stream:
            return dict(json.loads(stream.read()))
    except (FileNotFoundError, pa.ArrowException, OSError):
        return None


def _footer(root: storage.Location, name: str) -> tuple[int, Any]:
    import pyarrow.parquet as pq

    with root.filesystem.open_input_file(path_in(root, name)) as file:
        return file.size(), pq.ParquetFile(file).metadata


def _first_rows(root: storage.Location, row_groups: list[RowGroup]) -> dict[str, int]:
    """The element count of every list column's first value (the shape frameworks see per row)."""
    import pyarrow.parquet as pq

    first = next((group for group in row_groups if group.num_rows), None)
    if first is None:
        return {}
    with root.filesystem.open_input_file(path_in(root, first.file)) as file:
        parquet = pq.ParquetFile(file)
        names = [f.name for f in parquet.schema_arrow if columns.is_list(f.type)]
        if not names:
            return {}
        table = parquet.read_row_group(first.index, columns=names).slice(0, 1)
    return {name: len(table.column(name)[0].as_py() or []) for name in names}
