"""`fit`'s input, checked on the driver before any rank starts: columns, their types, the validation split,
the loss, and whether the model can be sent to the ranks. Each error says what to change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cloudpickle

from sparkrunner.data import columns
from sparkrunner.errors import (
    InvalidArgumentError,
    NotEnoughDataError,
    NotPicklableError,
    UnsupportedColumnError,
)
from sparkrunner.ml.losses import LOSS_NAMES, metric_name
from sparkrunner.options import check_choice, check_number

DATA_MODES = ("materialize", "stream")
_LABEL_TYPES = {"boolean", "byte", "short", "integer", "long", "float", "double"}


def check_columns(
    df: Any, feature_cols: Sequence[str], label_cols: Sequence[str], weight_col: str | None
) -> None:
    """Every named column exists; features are numbers, arrays or vectors; labels are numbers, arrays or vectors;
    weights are numbers."""
    if not hasattr(df, "schema") or not hasattr(df, "mapInArrow"):
        raise InvalidArgumentError(f"fit takes a Spark DataFrame, not a {type(df).__name__}")
    named = {"feature_cols": list(feature_cols or ()), "label_cols": list(label_cols or ())}
    for name, value in named.items():
        if not value:
            raise InvalidArgumentError(
                f"{name} is empty: name the DataFrame's columns to use, e.g. {name}=['x']"
            )
    check_present(df, [*named["label_cols"], *([weight_col] if weight_col else [])])
    check_features(df, named["feature_cols"])
    fields = {f.name: f for f in df.schema.fields}
    for name in [*named["label_cols"], *([weight_col] if weight_col else [])]:
        _check_number_column(
            name, fields[name].dataType, "label" if name in named["label_cols"] else "weight"
        )


def check_features(df: Any, feature_cols: Sequence[str]) -> None:
    """The feature columns exist and are numbers, arrays of numbers or ML vectors (for fit and transform)."""
    check_present(df, feature_cols)
    fields = {f.name: f for f in df.schema.fields}
    columns.check_spark_schema(_schema([fields[c] for c in feature_cols]), vectors_to_arrays=True)


def check_present(df: Any, names: Sequence[str]) -> None:
    missing = [c for c in names if c not in df.columns]
    if missing:
        raise InvalidArgumentError(f"columns {missing} are not in the DataFrame; it has {df.columns}")


def _check_number_column(name: str, data_type: Any, role: str) -> None:
    type_name = columns.spark_type_name(data_type)
    element = (
        type_name[len("array<") : -1] if role == "label" and type_name.startswith("array<") else type_name
    )
    if role == "label" and type_name == "vector":  # one-hot labels (OneHotEncoder's), as Horovod takes them
        return
    if element not in _LABEL_TYPES:
        hint = (
            "index it with pyspark.ml.feature.StringIndexer" if type_name == "string" else "cast it to double"
        )
        raise UnsupportedColumnError(f"the {role} column {name!r} has type {type_name}, not a number: {hint}")


def _schema(fields: list[Any]) -> Any:
    from pyspark.sql.types import StructType

    return StructType(fields)


def row_shapes(name: str, shapes: Any, columns: Sequence[str]) -> tuple[tuple[int, ...], ...] | None:
    """Horovod's `input_shapes` / `label_shapes` (one shape per column, led by -1 for the batch, as
    ``[[-1, 1, 28, 28]]``; a shape without it is a row's shape) as each column's row shape; None for None."""
    if shapes is None:
        return None
    example = "[[-1, 1, 28, 28]] for one column of 784 values"
    if not isinstance(shapes, (list, tuple)) or len(shapes) != len(columns):
        raise InvalidArgumentError(
            f"{name}={shapes!r}: give one shape per column of {list(columns)} ({len(columns)}), e.g. {example}"
        )
    return tuple(_row_shape(name, shape, example) for shape in shapes)


def _row_shape(name: str, shape: Any, example: str) -> tuple[int, ...]:
    dims = list(shape) if isinstance(shape, (list, tuple)) else None
    if dims and dims[0] in (-1, None):
        dims = dims[1:]
    if dims is None or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise InvalidArgumentError(
            f"{name}: the shape {shape!r} is not a list of sizes >= 1 led by -1 for the batch, as {example}"
        )
    return tuple(dims)


def column_widths(df: Any, names: Sequence[str]) -> dict[str, int]:
    """Values a row in each column: 1 for a number, a vector's recorded size, else the first row's length."""
    widths: dict[str, int] = {}
    for name in names:
        field = df.schema[name]
        kind = columns.spark_type_name(field.dataType)
        if kind == "vector":
            size = field.metadata.get("ml_attr", {}).get("num_attrs")
            if isinstance(size, int):
                widths[name] = size
        elif not kind.startswith("array<"):
            widths[name] = 1
    unknown = [n for n in names if n not in widths]
    if unknown:
        row = df.select(*[f"`{n}`" for n in unknown]).first()
        widths.update({n: 0 if row is None or row[n] is None else len(row[n]) for n in unknown})
    return widths


def check_validation(df: Any, validation: Any) -> None:
    """None, a fraction strictly between 0 and 1, or a boolean (or 0/1) column of `df`."""
    if validation is None:
        return
    if isinstance(validation, str):
        if validation not in df.columns:
            raise InvalidArgumentError(
                f"validation column {validation!r} is not in the DataFrame; it has {df.columns}"
            )
        type_name = columns.spark_type_name(df.schema[validation].dataType)
        if type_name not in ("boolean", "byte", "short", "integer", "long"):
            raise UnsupportedColumnError(
                f"validation column {validation!r} has type {type_name}: it must be boolean (true marks a "
                "validation row) or 0/1"
            )
        return
    if isinstance(validation, bool) or not isinstance(validation, (int, float)) or not 0 < validation < 1:
        raise InvalidArgumentError(
            f"validation={validation!r}: give the fraction of rows to hold out, strictly between 0 and 1 "
            "(e.g. 0.2), or the name of a boolean column that marks the validation rows"
        )


def check_training(epochs: Any, batch_size: Any, data: Any, verbose: Any) -> None:
    check_number("epochs", epochs, 1)
    check_number("batch_size", batch_size, 1)
    check_number("verbose", verbose, 0)
    check_choice("data", data, DATA_MODES)


def optional_size(name: str, value: Any) -> int | None:
    """None (the estimator's own choice), or an int >= 1: `val_batch_size`, the steps of an epoch."""
    return None if value is None else int(check_number(name, value, 1))


def metric_functions(metrics: Any) -> list[Any]:
    """`TorchEstimator`'s `metrics`: a list of functions ``fn(outputs, labels)``, each picklable, their names
    (what the history records them under) distinct and not the loss's or accuracy's."""
    if metrics is None:
        return []
    if not isinstance(metrics, (list, tuple)) or not all(callable(fn) for fn in metrics):
        raise InvalidArgumentError(
            f"metrics={metrics!r}: give a list of functions fn(outputs, labels) that return a number tensor"
        )
    names = [metric_name(fn) for fn in metrics]
    clashing = sorted({n for n in names if names.count(n) > 1 or n in ("loss", "accuracy")})
    if clashing:
        raise InvalidArgumentError(
            f"metrics: the names {clashing} are taken (by another metric, or by the loss or accuracy the history "
            "already records): give each metric function a name of its own (def, or functools.wraps)"
        )
    for name, fn in zip(names, metrics, strict=True):
        pickled(f"metric {name}", fn)
    return list(metrics)


def check_loss(loss: Any) -> None:
    if isinstance(loss, str):
        check_choice("loss", loss, LOSS_NAMES)
    elif not callable(loss):
        raise InvalidArgumentError(
            f"loss={loss!r}: give a torch loss module, a function loss(outputs, labels) that returns one value "
            f"per row, or one of {', '.join(LOSS_NAMES)}"
        )


def check_not_empty(df: Any) -> None:
    """One row is looked for (a Spark job that stops at the first row): no rows, nothing to train on."""
    if df.isEmpty():
        raise NotEnoughDataError(
            "the DataFrame has no rows: there is nothing to train on (check its filters)"
        )


def pickled(what: str, value: Any, to: str = "the ranks") -> bytes:
    """`value` pickled to send `to` the ranks (or the executors), or a NotPicklableError that names `what`
    and the cause."""
    try:
        return bytes(cloudpickle.dumps(value))
    except Exception as exc:
        raise NotPicklableError(
            f"the {what} cannot be sent to {to}: pickling it failed with {type(exc).__name__}: {exc}. Keep "
            "what cannot be pickled (a SparkSession, an open file, a lock, a live connection) out of it, or "
            "build it inside the model's code"
        ) from exc
