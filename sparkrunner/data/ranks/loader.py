"""The per-rank loader: this rank's batches of numpy arrays, the same number of steps on every rank."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from sparkrunner.channel.messages import StreamOpen
from sparkrunner.common.checks import check_choice, check_number
from sparkrunner.data import shards, shared_storage
from sparkrunner.data.columns import Chunk
from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.ranks import arrow_reader, batching, petastorm_reader, resume, stream_reader
from sparkrunner.data.ranks.prefetch import prefetched
from sparkrunner.data.stream_handle import StreamData
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ranks.anatomy import timed
from sparkrunner.ranks.api import rank_context

READERS = ("arrow", "petastorm")


class NumpyLoader:
    """Batches of this rank's shard as ``{column: numpy array}``; ``len(loader)`` is the steps per epoch.

    Every rank gets ``len(loader)`` batches of exactly ``batch_size`` rows per epoch, computed from the
    dataset's metadata, so collective ops never wait on a rank that ran out. Shards are disjoint; one
    epoch covers the dataset once except for the remainder: ``remainder="drop"`` (default) leaves out
    fewer than ``world_size * batch_size`` rows (other rows each epoch when shuffling),
    ``remainder="pad"`` repeats rows from the start of the epoch's order to fill the last step.
    Shuffling is seeded by ``(seed, epoch)``: call ``set_epoch(epoch)`` before each epoch.
    ``state_dict()`` / ``load_state_dict(state)`` resume mid-epoch, at any world size (docs/elastic.md).

    Args:
        data: the dataset from `materialize`, or a `stream` (its own shuffle and seed apply; reader "arrow").
        batch_size: rows per batch on each rank.
        columns: the columns to read (default: all).
        shuffle: shuffle row groups globally and rows within `shuffle_buffer_rows` windows on each rank.
        seed: any int >= 0 (0 included); the same seed gives the same order on a rerun.
        remainder: ``"drop"`` or ``"pad"`` (see above).
        reader: ``"arrow"`` (pyarrow.dataset, default) or ``"petastorm"`` (make_batch_reader; pyarrow < 15).
        prefetch: row-group chunks read ahead in the background (the bound on prefetch memory).
        shuffle_buffer_rows: rows mixed together when shuffling (default: one row group at a time).
        max_steps: at most this many batches per epoch (None: one pass), the same on every rank; the rows an
            epoch leaves out are read by none.
        rank, world_size: override what the run sets (``sparkrunner.rank_context()``).
    """

    def __init__(
        self,
        data: ParquetData | StreamData,
        batch_size: int,
        *,
        columns: Sequence[str] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        remainder: str = shards.DEFAULT_REMAINDER,
        reader: str = "arrow",
        prefetch: int = 2,
        shuffle_buffer_rows: int = 0,
        max_steps: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        context = rank_context()
        self.rank = context.rank if rank is None else rank
        self.world_size = context.world_size if world_size is None else world_size
        self.columns = tuple(columns) if columns is not None else data.column_names
        _check_options(data, self.columns, batch_size, seed, reader, prefetch, shuffle_buffer_rows)
        _check_rank(self.rank, self.world_size)
        self.max_steps = None if max_steps is None else check_number("max_steps", max_steps, 1)
        shards.check_remainder(remainder)
        if isinstance(data, StreamData):
            check_choice("reader", reader, READERS[:1])
            shuffle, seed = data.shuffle, data.seed
        elif reader == "petastorm":
            petastorm_reader.check_available()
        if isinstance(data, ParquetData):
            shared_storage.check_rank_sees(data, self.rank)
        self.data = data
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.passes = 0
        self.remainder = remainder
        self.reader = reader
        self.prefetch = prefetch
        self.shuffle_buffer_rows = shuffle_buffer_rows
        self.epoch = 0
        self._segments: list[tuple[int, int, int]] = []  # earlier stretches of this epoch, resumed from
        self._left: np.ndarray | None = None  # the epoch's rows they left, when resumed
        self._yielded = 0
        self.steps = self._steps()

    def _steps(self) -> int:
        whole = self._pass_steps()
        return whole if self.max_steps is None else min(whole, self.max_steps)

    def _pass_steps(self) -> int:
        """The steps of one pass over the epoch's rows."""
        if isinstance(self.data, StreamData):
            return shards.row_split_steps(
                self.data.num_rows, self.world_size, self.batch_size, self.remainder
            )
        if self._left is not None:
            return self._plan().steps(len(self._left), self.world_size)
        group_rows = [group.num_rows for group in self.data.row_groups]
        if self.reader == "petastorm":
            return shards.group_split_steps(group_rows, self.world_size, self.batch_size, self.remainder)
        return shards.row_split_steps(sum(group_rows), self.world_size, self.batch_size, self.remainder)

    def __len__(self) -> int:
        return self.steps

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iteration follows (shuffling is seeded by (seed, epoch))."""
        if check_number("epoch", epoch, 0) != self.epoch:
            self.epoch = epoch
            self._fresh_epoch()

    def state_dict(self) -> dict[str, Any]:
        """Where this epoch is: save it in a checkpoint (rank 0's is everyone's: all ranks are at one step)."""
        segments = [*self._segments, (self.world_size, self.batch_size, self._yielded)]
        return {"epoch": self.epoch, "segments": segments, "rows": self.data.num_rows}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume the saved epoch where it stopped, with this loader's world size: the next iteration yields
        the epoch's rows not yet read, split among the ranks there are now."""
        if isinstance(self.data, StreamData):
            raise InvalidArgumentError(
                "a stream cannot resume mid-epoch: resume from a materialized dataset (materialize(df)), "
                "or start the stream's epoch again"
            )
        if state.get("rows") != self.data.num_rows or self.reader != "arrow":
            raise InvalidArgumentError(
                f"this loader state is for a dataset of {state.get('rows')} rows; this one has "
                f"{self.data.num_rows} and reader={self.reader!r} (resuming needs the same data and "
                f"reader='arrow')"
            )
        self.epoch = check_number("epoch", state["epoch"], 0)
        self._segments = [(int(w), int(b), int(s)) for w, b, s in state["segments"]]
        self._left = resume.rows_left(self._plan(), self._segments)
        self._yielded = 0
        self.steps = self._steps()

    def _fresh_epoch(self) -> None:
        self._segments, self._left, self._yielded = [], None, 0
        self.steps = self._steps()

    def _plan(self) -> resume.Plan:
        # a stream has no row groups: it never resumes, and only uses the plan's row-shuffle generator
        data = self.data
        group_rows = [] if isinstance(data, StreamData) else [group.num_rows for group in data.row_groups]
        return resume.Plan(
            group_rows,
            self.batch_size,
            self.shuffle,
            self.seed,
            self.epoch,
            self.remainder,
            self.shuffle_buffer_rows,
        )

    def __iter__(self) -> Iterator[Chunk]:
        return timed(self.untimed())

    def untimed(self) -> Iterator[Chunk]:
        """The batches, without counting steps: for a reader that runs ahead of the loop (tf.data)."""
        if self._yielded:  # a second pass over the epoch starts it again
            self._fresh_epoch()
        chunks = prefetched(self._read, self.prefetch)
        try:
            if self.shuffle:
                rng = self._plan().rng(self.rank, len(self._segments))
                chunks = batching.shuffled(chunks, rng, self.shuffle_buffer_rows)
            for batch in batching.batches(chunks, self.batch_size, self.steps):
                self._yielded += 1
                yield batch
            if isinstance(self.data, StreamData):
                for _ in chunks:  # read the pass to its end, where the broker's verdict on the pass comes
                    pass
        finally:
            chunks.close()  # type: ignore[attr-defined]

    def _read(self) -> Iterator[Chunk]:
        if isinstance(self.data, StreamData):
            opened = StreamOpen(
                self.data.stream_id,
                self.passes,
                self.epoch,
                self.rank,
                self.world_size,
                self.steps * self.batch_size,
            )
            self.passes += 1
            return stream_reader.read_pass(self.data, self.columns, opened)
        if self.reader == "petastorm":
            return petastorm_reader.read_shard(
                self.data,
                self.columns,
                self.rank,
                self.world_size,
                self.shuffle,
                self.seed,
                self.epoch,
                self.prefetch,
            )
        if self._left is not None:
            slices = resume.rank_slices(self._plan(), self._left, self.world_size, self.rank)
            return arrow_reader.read_slices(self.data, self.columns, slices)
        group_rows = [group.num_rows for group in self.data.row_groups]
        order = shards.group_order(len(group_rows), self.shuffle, self.seed, self.epoch)
        slices = shards.rank_slices(group_rows, order, self.rank, self.steps * self.batch_size)
        return arrow_reader.read_slices(self.data, self.columns, slices)


def _check_options(
    data: ParquetData | StreamData,
    columns: Sequence[str],
    batch_size: int,
    seed: int,
    reader: str,
    prefetch: int,
    shuffle_buffer_rows: int,
) -> None:
    numbers = (("batch_size", batch_size, 1), ("seed", seed, 0), ("prefetch", prefetch, 1))
    for name, value, least in (*numbers, ("shuffle_buffer_rows", shuffle_buffer_rows, 0)):
        check_number(name, value, least)
    check_choice("reader", reader, READERS)
    unknown = [name for name in columns if name not in data.column_names]
    if unknown or not columns:
        raise InvalidArgumentError(
            f"columns {unknown or list(columns)} are not in the dataset; it has {list(data.column_names)}"
        )


def _check_rank(rank: int, world_size: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise InvalidArgumentError(f"rank {rank} is not within world_size {world_size}")
