"""The rows of a `fit`, on their way to the ranks: the columns it needs, split into training and validation in
Spark, and handed over as `materialize`d Parquet or a `stream`. Nothing is collected on the driver."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sparkrunner.data import close_stream, materialize, stream
from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.stream_handle import StreamData
from sparkrunner.errors import NotEnoughDataError

Data = ParquetData | StreamData


def split(df: Any, needed: Sequence[str], validation: Any, seed: int) -> tuple[Any, Any | None]:
    """(training rows, validation rows or None), with only the `needed` columns: a random fraction split
    (seeded, so a rerun splits alike) or a boolean column's true rows."""
    if validation is None:
        return df.select(*needed), None
    if isinstance(validation, str):
        marked = df[validation].cast("boolean")  # a column of df's own kind of session (classic or Connect)
        return df.where(~marked).select(*needed), df.where(marked).select(*needed)
    train, held_out = df.select(*needed).randomSplit([1.0 - float(validation), float(validation)], seed)
    return train, held_out


@contextmanager
def handed_over(
    frames: Sequence[Any | None], mode: str, store: str | None, seed: int, shuffle: bool
) -> Iterator[list[Data | None]]:
    """Handles the ranks read `frames` (training, validation or None) through; streams are closed at the end.
    A stream's order is set here: the training one shuffled as asked, the validation one never."""
    handles: list[Data | None] = []
    try:
        for name, frame, mixed in zip(("training", "validation"), frames, (shuffle, False), strict=False):
            handles.append(None if frame is None else _handle(frame, mode, store, seed, name, mixed))
        yield handles
    finally:
        for handle in handles:
            if isinstance(handle, StreamData):
                close_stream(handle)


def _handle(frame: Any, mode: str, store: str | None, seed: int, name: str, shuffle: bool) -> Data:
    data: Data = stream(frame, shuffle=shuffle, seed=seed) if mode == "stream" else materialize(frame, store)
    if data.num_rows == 0:
        raise NotEnoughDataError(
            f"the {name} rows are empty: the DataFrame has too few rows for this split (give more rows, a "
            "larger validation fraction, or check the validation column)"
        )
    return data
