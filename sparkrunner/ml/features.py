"""Feature columns as one float32 matrix: the same assembly in the ranks (training) and the executors (scoring)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def matrix(columns: Sequence[Any]) -> np.ndarray:
    """``(rows, width)`` float32 from numeric columns (one value per row) and array columns (rows, n), side by
    side in the order given: what a model's ``forward`` receives."""
    parts = [_two_d(np.asarray(column)) for column in columns]
    return np.ascontiguousarray(np.concatenate(parts, axis=1), dtype=np.float32)


def from_pandas(series: Any) -> np.ndarray:
    """A pandas column of numbers, or of arrays (one per row, as Arrow hands array columns to pandas)."""
    values = series.to_numpy()
    if values.dtype == object:
        return np.stack(values) if len(values) else np.zeros((0, 0), np.float32)
    return values


def _two_d(values: np.ndarray) -> np.ndarray:
    return values.reshape(len(values), -1)
