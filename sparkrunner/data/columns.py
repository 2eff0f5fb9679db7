"""Which columns a framework can take (numbers, booleans, fixed-length arrays of them), and their numpy form."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sparkrunner.errors import UnsupportedColumnError

Chunk = dict[str, np.ndarray]

# What to do instead, by the name Spark gives the unsupported type.
_SPARK_HINTS = {
    "string": "encode it as numbers first, e.g. with pyspark.ml.feature.StringIndexer, or drop it",
    "decimal": "cast it to double",
    "timestamp": "cast it to long (seconds since the epoch)",
    "timestamp_ntz": "cast it to long (seconds since the epoch)",
    "date": "cast it to int (days since the epoch)",
    "binary": "decode it into an array of numbers",
    "map": "select the values you need as separate columns",
    "struct": "select its fields as separate columns",
    "vector": "pass vectors_to_arrays=True to turn it into an array",
}
_SPARK_NUMBERS = {"boolean", "byte", "short", "integer", "long", "float", "double"}


@dataclass(frozen=True)
class Column:
    """A column as frameworks see it: numpy dtype name and the shape of one row's value."""

    name: str
    dtype: str
    shape: tuple[int, ...]


def spark_type_name(data_type: Any) -> str:
    """Spark's short name of a type, "vector" for ML vectors, and "array<...>" for arrays."""
    if type(data_type).__name__ == "VectorUDT":  # pyspark.ml.linalg and pyspark.mllib.linalg alike
        return "vector"
    name = str(data_type.typeName())
    return f"array<{spark_type_name(data_type.elementType)}>" if name == "array" else name


def check_spark_schema(schema: Any, vectors_to_arrays: bool) -> None:
    """Raise UnsupportedColumnError naming every column of a Spark schema that cannot reach a framework."""
    problems = []
    for field in schema.fields:
        type_name = spark_type_name(field.dataType)
        if type_name == "vector" and vectors_to_arrays:
            continue
        element = type_name[len("array<") : -1] if type_name.startswith("array<") else type_name
        if element not in _SPARK_NUMBERS:
            hint = _SPARK_HINTS.get(element, "select only numeric columns")
            problems.append(f"  {field.name!r} has type {type_name}: {hint}")
    _raise_if(problems)


def is_list(arrow_type: Any) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_list(arrow_type)
        or pa.types.is_large_list(arrow_type)
        or pa.types.is_fixed_size_list(arrow_type)
    )


def from_arrow(schema: Any, list_lengths: dict[str, int]) -> tuple[Column, ...]:
    """The frameworks' view of an Arrow schema; UnsupportedColumnError for columns they cannot take."""
    found, problems = [], []
    for field in schema:
        element = field.type.value_type if is_list(field.type) else field.type
        dtype = _numpy_dtype(element)
        if dtype is None:
            problems.append(f"  {field.name!r} has Arrow type {field.type}: select only numeric columns")
            continue
        shape = (list_lengths.get(field.name, 0),) if is_list(field.type) else ()
        found.append(Column(field.name, dtype, shape))
    _raise_if(problems)
    return tuple(found)


def _numpy_dtype(arrow_type: Any) -> str | None:
    import pyarrow as pa

    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_boolean(arrow_type):
        return str(np.dtype(arrow_type.to_pandas_dtype()))
    return None


def _raise_if(problems: list[str]) -> None:
    if problems:
        raise UnsupportedColumnError(
            "these columns cannot be fed to a training framework (numbers, booleans and arrays of them can):\n"
            + "\n".join(problems)
        )


def to_numpy(table: Any) -> Chunk:
    """Columns of an Arrow table (or record batch) as numpy arrays; lists become 2-D (rows, length)."""
    return {name: column_to_numpy(name, table.column(name)) for name in table.column_names}


def column_to_numpy(name: str, column: Any) -> np.ndarray:
    """An Arrow column of numbers as numpy, of equal-length lists as (rows, length): no Python object per row;
    UnsupportedColumnError for nulls and for lists of different lengths."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        raise UnsupportedColumnError(
            f"column {name!r} has {array.null_count} null values: fill them (DataFrame.fillna) or filter them "
            "out first"
        )
    if not is_list(array.type):
        return array.to_numpy(zero_copy_only=False)
    values = array.flatten()
    rows = len(array)
    if rows == 0:
        return column_to_numpy(name, values).reshape(0, 0)
    if len(values) % rows == 0:
        width = len(values) // rows
        offsets = array.offsets.to_numpy() if hasattr(array, "offsets") else None
        if offsets is None or np.all(np.diff(offsets) == width):
            return column_to_numpy(name, values).reshape(rows, width)
    raise UnsupportedColumnError(
        f"column {name!r} holds arrays of different lengths; frameworks need one length per column: pad or "
        "truncate them in Spark first"
    )
