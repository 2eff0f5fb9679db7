"""Feature columns as one float32 matrix, or as one array per column in its row shape (Horovod's `input_shapes`):
the same assembly in the ranks (training) and the executors (scoring)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from sparkrunner.errors import InvalidArgumentError


def matrix(columns: Sequence[Any]) -> np.ndarray:
    """``(rows, width)`` float32 from numeric columns (one value per row) and array columns (rows, n), side by
    side in the order given: what a model's ``forward`` receives."""
    parts = [_two_d(np.asarray(column)) for column in columns]
    return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)


def shaped(columns: Sequence[Any], shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """One float32 array per column, each ``(rows, *shape)``: the tensors Horovod passes to ``forward``."""
    return [
        matrix([column]).reshape(len(column), *shape) for column, shape in zip(columns, shapes, strict=True)
    ]


def split(values: np.ndarray, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """A `matrix` of columns cut back into one array per column, each ``(rows, *shape)`` (scoring's inputs)."""
    widths = [math.prod(shape) for shape in shapes]
    if values.shape[1] != sum(widths):
        raise InvalidArgumentError(
            f"the feature columns hold {values.shape[1]} values a row, but their input_shapes "
            f"{[list(s) for s in shapes]} hold {sum(widths)}: give each column a shape of its own width"
        )
    parts = np.split(values, np.cumsum(widths)[:-1], axis=1)
    return [part.reshape(len(values), *shape) for part, shape in zip(parts, shapes, strict=True)]


def check_widths(
    what: str, shapes: Sequence[tuple[int, ...]], columns: Sequence[str], widths: Sequence[int]
) -> None:
    """The columns' values (`widths`: values a row) fill the row `shapes` exactly: one column per shape when they
    are as many, else all the columns side by side (a Keras model's inputs over the feature matrix); else an
    `InvalidArgumentError` names the column(s) and shape(s) that disagree (checked before any rank starts)."""
    pairs = (
        [([c], w, [s]) for c, w, s in zip(columns, widths, shapes, strict=True)]
        if len(columns) == len(shapes)
        else [(list(columns), sum(widths), list(shapes))]
    )
    for names, width, wanted in pairs:
        size = sum(math.prod(shape) for shape in wanted)
        if width != size:
            held = (
                f"the column {names[0]!r} holds"
                if len(names) == 1
                else f"the columns {names} side by side hold"
            )
            its = "its shape" if len(wanted) == 1 else "the shapes"
            raise InvalidArgumentError(
                f"{what}: {held} {width} values a row, but {its} {', '.join(str([-1, *s]) for s in wanted)} "
                f"{'holds' if len(wanted) == 1 else 'hold'} {size}: make them agree (a shape of {width} values "
                f"is [-1, {width}])"
            )


def from_pandas(series: Any) -> np.ndarray:
    """A pandas column of numbers, or of arrays (one per row, as Arrow hands array columns to pandas)."""
    values = series.to_numpy()
    if values.dtype == object:
        return np.stack(values) if len(values) else np.zeros((0, 0), np.float32)
    return values


def _two_d(values: np.ndarray) -> np.ndarray:
    return values.reshape(len(values), -1)
