"""The native reader: this rank's row slices, read from Parquet row groups with pyarrow.dataset."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sparkrunner.data.columns import Chunk, to_numpy
from sparkrunner.data.dataset import ParquetData, path_in
from sparkrunner.data.shards import Slice


def read_slices(data: ParquetData, names: Sequence[str], slices: Sequence[Slice]) -> Iterator[Chunk]:
    """One numpy chunk per slice, in order; each read decodes a single row group's selected columns."""
    import pyarrow.dataset as pads

    parquet, root = pads.ParquetFileFormat(), data.location()
    for piece in slices:
        group = data.row_groups[piece.group]
        fragment = parquet.make_fragment(path_in(root, group.file), root.filesystem, row_groups=[group.index])
        table = fragment.to_table(columns=list(names))
        yield to_numpy(table.slice(piece.start, piece.stop - piece.start))
