"""The native reader: this rank's row slices, read from Parquet row groups with pyarrow.

Each file's footer is read once per pass (not once per row group). From an object store every request costs a
round trip, so a file the rank reads most of is fetched whole in one request - the next such file while this
one is decoded - and decoded from memory; other row groups take one request each (pyarrow's pre-buffering
coalesces a row group's column chunks).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import groupby
from typing import Any

from sparkrunner.common.storage import Location
from sparkrunner.data.columns import Chunk, to_numpy
from sparkrunner.data.dataset import ParquetData, path_in
from sparkrunner.data.shards import Slice

# A remote file is fetched whole when the rank reads at least this share of its rows and it is no larger than
# WHOLE_FILE_BYTES (at most two such files are held in memory: the one decoded and the one fetched ahead).
WHOLE_FILE_SHARE = 0.5
WHOLE_FILE_BYTES = 256 * 2**20

Run = tuple[str, list[Slice]]  # consecutive slices of one file


def read_slices(data: ParquetData, names: Sequence[str], slices: Sequence[Slice]) -> Iterator[Chunk]:
    """One numpy chunk per slice, in order; each decodes a single row group's selected columns."""
    root = data.location()
    footers = _Footers(data, root)
    runs: list[Run] = [
        (file, list(pieces)) for file, pieces in groupby(slices, lambda s: data.row_groups[s.group].file)
    ]
    with ThreadPoolExecutor(1, thread_name_prefix="sparkrunner-fetch") as fetcher:
        fetches = [_fetch_whole(fetcher, data, root, run) for run in runs[:1]]
        try:
            for number, (file, pieces) in enumerate(runs):
                fetches += [_fetch_whole(fetcher, data, root, run) for run in runs[number + 1 : number + 2]]
                fetched = fetches[number]
                whole = _open_buffer(fetched.result()) if fetched is not None else None
                fetches[number] = None  # the buffer goes once its file is decoded
                for piece in pieces:
                    group = data.row_groups[piece.group]
                    table = (
                        whole.read_row_group(group.index, columns=list(names))
                        if whole is not None
                        else footers.row_group(file, group.index, names)
                    )
                    yield to_numpy(table.slice(piece.start, piece.stop - piece.start))
        finally:
            for pending in fetches:
                if pending is not None:
                    pending.cancel()


def _fetch_whole(
    fetcher: ThreadPoolExecutor, data: ParquetData, root: Location, run: Run
) -> Future[Any] | None:
    """The whole file's bytes, fetched in the background, where that beats reading its row groups one by one."""
    file, pieces = run
    known = next((f for f in data.files if f.name == file), None)
    wanted = sum(piece.stop - piece.start for piece in pieces)
    if root.is_local or known is None or not 0 < known.size <= WHOLE_FILE_BYTES:
        return None
    if wanted < WHOLE_FILE_SHARE * known.num_rows:
        return None
    return fetcher.submit(_read_all, root, file, known.size)


def _read_all(root: Location, file: str, size: int) -> Any:
    with root.filesystem.open_input_file(path_in(root, file)) as opened:
        return opened.read_buffer(size)


def _open_buffer(buffer: Any) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.ParquetFile(pa.BufferReader(buffer))


class _Footers:
    """Each file's fragment with its footer read once; a row group is then read without reading it again."""

    def __init__(self, data: ParquetData, root: Location) -> None:
        import pyarrow.dataset as pads

        self._format = pads.ParquetFileFormat()
        self._root = root
        self._sizes = {file.name: file.size for file in data.files}
        self._fragments: dict[str, Any] = {}

    def row_group(self, file: str, index: int, names: Sequence[str]) -> Any:
        if file not in self._fragments:
            fragment = self._format.make_fragment(
                path_in(self._root, file), self._root.filesystem, file_size=self._sizes.get(file)
            )
            fragment.ensure_complete_metadata()
            self._fragments[file] = fragment
        return self._fragments[file].subset(row_group_ids=[index]).to_table(columns=list(names))
