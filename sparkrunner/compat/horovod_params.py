"""Horovod's estimator arguments (``horovod.spark.torch.TorchEstimator``, ``horovod.spark.keras.KerasEstimator``)
translated into sparkrunner's `sparkrunner.ml` Params: the same names pass through, `random_seed` becomes `seed`,
`store` becomes a path, and every argument sparkrunner cannot honour is refused by name, never ignored."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

from sparkrunner.compat.spark_facts import positive_int
from sparkrunner.errors import InvalidArgumentError, SparkRunnerWarning

PASSED_ON = (
    "num_proc", "model", "optimizer", "loss", "feature_cols", "label_cols", "batch_size", "epochs",
    "validation", "sample_weight_col", "run_id", "verbose", "shuffle",
)  # fmt: skip
"""Horovod's names that sparkrunner's estimators take with the same meaning."""

RENAMED = {"random_seed": "seed"}

HONOURED_DEFAULTS: dict[str, Any] = {
    "data_module": None, "loss_constructors": None, "metrics": None, "loss_weights": None,
    "gradient_compression": None, "continuous_cols": None, "categorical_cols": None, "callbacks": None,
    "val_batch_size": None, "shuffle_buffer_size": None, "partitions_per_process": 10,
    "train_minibatch_fn": None, "train_steps_per_epoch": None, "validation_steps_per_epoch": None,
    "transformation_fn": None, "train_reader_num_workers": 2, "val_reader_num_workers": 2,
    "reader_pool_type": "thread", "label_shapes": None, "inmemory_cache_all": False, "use_gpu": True,
    "mp_start_method": None, "backward_passes_per_step": 1, "custom_objects": None,
    "checkpoint_callback": None, "backend_env": None, "transformation_edit_fields": None,
    "transformation_removed_fields": None, "num_gpus": None, "logger": None, "log_every_n_steps": 50,
    "loader_num_epochs": None, "terminate_on_nan": False, "profiler": None, "debug_data_loader": False,
    "train_async_data_loader_queue_size": None, "val_async_data_loader_queue_size": None,
}  # fmt: skip
"""Horovod's arguments that sparkrunner has no counterpart for, with the value that means what sparkrunner
does anyway (Horovod's default, or "none" where Horovod's default is an empty list)."""

_EMPTY_MEANS_DEFAULT = {"callbacks", "metrics", "custom_objects"}


def translated(
    given: Mapping[str, Any], also_passed: tuple[str, ...] = (), not_passed: tuple[str, ...] = ()
) -> dict[str, Any]:
    """sparkrunner Params for Horovod's keyword arguments `given` (only those the caller passed); sparkrunner's
    own names (np, launcher, data, ...) and `also_passed` (what this estimator honours besides `PASSED_ON`)
    pass through; `not_passed` (of `PASSED_ON`, what this estimator has no Param for) is refused unless None.
    Refuses what sparkrunner cannot honour, naming each; sets Horovod's output column name."""
    _refuse_unsupported({k: v for k, v in given.items() if k not in also_passed}, not_passed)
    params: dict[str, Any] = _from_backend(given)
    for name, value in given.items():
        skipped = name in HONOURED_DEFAULTS and name not in also_passed
        if skipped or name in not_passed or name in ("input_shapes", "backend"):
            continue
        if name == "store":
            params["store"] = store_path(value)
        elif name in RENAMED:
            if value is not None:
                params[RENAMED[name]] = value
        elif name not in PASSED_ON or value is not None:  # Horovod's None means "its default": use ours
            params[name] = value
    check_input_shapes(given.get("input_shapes"), params.get("feature_cols"))
    output = output_col(params.get("label_cols"))
    if output is not None and "prediction_col" not in params:
        params["prediction_col"] = output
    return params


def output_col(label_cols: Any) -> str | None:
    """Horovod's name for the output column of one label column: ``<label>__output``."""
    labels = list(label_cols or ())
    return f"{labels[0]}__output" if len(labels) == 1 else None


def _from_backend(given: Mapping[str, Any]) -> dict[str, Any]:
    """Horovod's `backend` (what started its ranks) is accepted, with a warning that sparkrunner places the
    ranks itself; its ``num_processes()`` becomes `num_proc` when neither `num_proc` nor `np` is given."""
    backend = given.get("backend")
    if backend is None:
        return {}
    sized = given.get("num_proc") is None and given.get("np") is None
    counted = getattr(backend, "num_processes", None)
    params = (
        {"num_proc": positive_int("backend.num_processes()", counted())}
        if sized and callable(counted)
        else {}
    )
    warnings.warn(
        f"backend={backend!r}: sparkrunner places the ranks itself (a Spark barrier stage, or processes on the "
        "driver for np < 0), so the backend starts nothing"
        + (f"; its num_processes() gives num_proc={params['num_proc']}" if params else ""),
        SparkRunnerWarning,
        stacklevel=2,
    )
    return params


def _refuse_unsupported(given: Mapping[str, Any], not_passed: tuple[str, ...]) -> None:
    table = {**HONOURED_DEFAULTS, **dict.fromkeys(not_passed)}
    refused = sorted(
        name
        for name, default in table.items()
        if name in given and not _is_default(name, given[name], default)
    )
    if refused:
        raise InvalidArgumentError(
            f"{', '.join(refused)}: Horovod's estimator argument(s) that sparkrunner's estimators do not "
            "honour. Leave them out (sparkrunner computes loss and accuracy itself, feeds the feature columns "
            "side by side as one float32 matrix, and places ranks on the GPU Spark assigns); see "
            "docs/ml.md, 'Coming from Horovod'"
        )


def _is_default(name: str, value: Any, default: Any) -> bool:
    """None (Horovod's signature's own default for most), the default, or an empty list of callbacks/metrics."""
    if value is None or (name in _EMPTY_MEANS_DEFAULT and len(value) == 0):
        return True
    return bool(value is default or value == default)


def check_input_shapes(shapes: Any, feature_cols: Any) -> None:
    """None, or for one feature column one row shape ``[n]`` (or ``[-1, n]`` with the batch): the matrix
    sparkrunner feeds the model."""
    if shapes is None:
        return
    flat = len(shapes) == 1 and (len(shapes[0]) == 1 or (len(shapes[0]) == 2 and shapes[0][0] in (-1, None)))
    if not flat or len(feature_cols or ()) != 1:
        raise InvalidArgumentError(
            f"input_shapes={shapes!r}: sparkrunner feeds the model one float32 matrix (rows, features) with the "
            "feature columns side by side, so it cannot reshape inputs or pass one tensor per column. Leave "
            "input_shapes out and reshape inside the model's forward (e.g. x.view(-1, 1, 28, 28))"
        )


def store_path(store: Any) -> str | None:
    """A path or URI for `store`: itself, or the ``prefix_path`` of a Horovod ``Store`` (LocalStore,
    FilesystemStore, HDFSStore, DBFSLocalStore) or anything shaped like one."""
    if store is None or isinstance(store, str):
        return store
    if isinstance(store, os.PathLike):
        return os.fspath(store)
    prefix = getattr(store, "prefix_path", None)
    if isinstance(prefix, str) and prefix:
        return prefix
    raise InvalidArgumentError(
        f"store={store!r}: give a path or URI every host can read, or a Horovod Store (LocalStore, HDFSStore, "
        "...) whose prefix_path is one"
    )
