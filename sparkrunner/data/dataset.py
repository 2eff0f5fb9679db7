"""The dataset handle passed to the ranks: a Parquet directory plus the global metadata every rank plans from."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from sparkrunner.data import columns
from sparkrunner.errors import InvalidArgumentError


@dataclass(frozen=True)
class RowGroup:
    """One Parquet row group: the unit both readers read (and Petastorm shards by)."""

    file: str  # path relative to the dataset root
    index: int
    num_rows: int


@dataclass(frozen=True)
class ParquetData:
    """A materialized dataset: where it is, its columns and its row groups, read once on the driver.

    Small and picklable: pass it to ``Runner.run`` as an argument; ranks plan their shards from this
    metadata alone, so every rank computes the same plan without reading any footer.
    """

    path: str
    columns: tuple[columns.Column, ...]
    row_groups: tuple[RowGroup, ...]

    @property
    def num_rows(self) -> int:
        return sum(group.num_rows for group in self.row_groups)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def file_path(self, group: RowGroup) -> str:
        """The absolute path of the file that holds `group`."""
        return os.path.join(self.path, group.file) if group.file else self.path

    def delete(self) -> None:
        """Remove the Parquet files from disk (for example a cached materialization no longer needed)."""
        shutil.rmtree(self.path, ignore_errors=True)


def scan(path: str) -> ParquetData:
    """Read the footers of the Parquet dataset at `path` (a local or mounted directory or file)."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    root = os.path.abspath(path)
    if not os.path.exists(root):
        raise InvalidArgumentError(f"there is no Parquet dataset at {root}")
    found = pads.dataset(root, format="parquet")
    files = sorted(found.files)
    row_groups = []
    for file in files:
        meta = pq.ParquetFile(file).metadata
        relative = os.path.relpath(file, root) if os.path.isdir(root) else ""
        row_groups += [RowGroup(relative, i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)]
    # empty row groups stay: Petastorm counts them when it deals row groups out to shards
    return ParquetData(
        root, columns.from_arrow(found.schema, _first_rows(root, row_groups)), tuple(row_groups)
    )


def _first_rows(root: str, row_groups: list[RowGroup]) -> dict[str, int]:
    """The element count of every list column's first value (the shape frameworks see per row)."""
    import pyarrow.parquet as pq

    first = next((group for group in row_groups if group.num_rows), None)
    if first is None:
        return {}
    parquet = pq.ParquetFile(os.path.join(root, first.file) if first.file else root)
    names = [field.name for field in parquet.schema_arrow if columns.is_list(field.type)]
    if not names:
        return {}
    table = parquet.read_row_group(first.index, columns=names).slice(0, 1)
    return {name: len(table.column(name)[0].as_py() or []) for name in names}
