"""The columns scoring appends, from a model's raw outputs: the same rule for the schema (on the driver) and the
values (in the executors). A regressor gives `prediction` (a number, or an array for several outputs); a
classifier gives `prediction` (the class, as Spark ML's classifiers do: a double) and `probability`."""

from __future__ import annotations

from typing import Any

import numpy as np

PREDICTION, PROBABILITY = "prediction", "probability"
PROBABILITY_KINDS = (None, "softmax", "exp", "sigmoid")
"""How a model's outputs become class probabilities: None for a regressor (see `columns`)."""


def spark_types(probability: str | None, output_size: int) -> dict[str, Any]:
    """The struct fields scoring returns, as Spark data types."""
    from pyspark.sql.types import ArrayType, DoubleType

    if probability is None:
        return {PREDICTION: DoubleType() if output_size == 1 else ArrayType(DoubleType())}
    return {PREDICTION: DoubleType(), PROBABILITY: ArrayType(DoubleType())}


def columns(probability: str | None, raw: np.ndarray) -> dict[str, np.ndarray]:
    """`spark_types`' columns for a batch of raw outputs ``(rows, output_size)``: a number a row (1-D) or an
    array a row (2-D)."""
    raw = raw.astype(np.float64).reshape(len(raw), -1)
    if probability is None:
        return {PREDICTION: raw[:, 0] if raw.shape[1] == 1 else raw}
    probabilities = _probabilities(probability, raw)
    return {PREDICTION: probabilities.argmax(axis=1).astype(np.float64), PROBABILITY: probabilities}


def as_pandas(columns: dict[str, np.ndarray]) -> Any:
    """`columns` as the frame a pandas UDF returns (an array column holds one array per row)."""
    import pandas as pd

    return pd.DataFrame({name: list(v) if v.ndim == 2 else v for name, v in columns.items()})


def as_arrow(columns: dict[str, np.ndarray]) -> Any:
    """`columns` as the struct an Arrow UDF returns, built from whole buffers: no Python object per row."""
    import pyarrow as pa

    arrays = [_arrow_column(v) for v in columns.values()]
    return pa.StructArray.from_arrays(arrays, names=list(columns))


def _arrow_column(values: np.ndarray) -> Any:
    import pyarrow as pa

    if values.ndim == 1:
        return pa.array(values)
    rows, width = values.shape
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    item = pa.list_(pa.field("element", pa.float64()))  # Spark's name for an array's items
    return pa.ListArray.from_arrays(offsets, pa.array(values.ravel()), type=item)


def _probabilities(kind: str, raw: np.ndarray) -> np.ndarray:
    if kind == "given":  # the model's own softmax layer already gives them (Keras classifiers)
        return raw
    if kind == "exp":  # log-probabilities (NLLLoss)
        return np.exp(raw)
    if kind == "sigmoid":  # one logit: P(1); [P(0), P(1)] as Spark ML's binary classifiers give
        positive = 1.0 / (1.0 + np.exp(-raw[:, :1]))
        return np.concatenate([1.0 - positive, positive], axis=1)
    shifted = np.exp(raw - raw.max(axis=1, keepdims=True))  # softmax of logits
    return shifted / shifted.sum(axis=1, keepdims=True)
