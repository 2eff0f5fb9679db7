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
    "validation", "sample_weight_col", "run_id", "verbose", "shuffle", "val_batch_size", "train_steps_per_epoch",
    "validation_steps_per_epoch",
)  # fmt: skip
"""Horovod's names that sparkrunner's estimators take with the same meaning."""

RENAMED = {"random_seed": "seed"}

_READER = (
    "a setting of Horovod's Petastorm reader, which sparkrunner does not use: each rank reads its shard with "
    "sparkrunner's own loader"
)
_TRAINER = "pytorch-lightning 2 has no such Trainer argument"

NOT_HONOURED: dict[str, tuple[Any, str]] = {
    "data_module": (None, "sparkrunner's rows reach the ranks through materialize or stream, not a data module"),
    "loss_weights": (None, (
        "it weighs one loss per label column, each on its own output of the model; sparkrunner's model returns "
        "one output tensor and one loss gets every label column side by side: weigh the columns inside that loss"
    )),
    "gradient_compression": (None, (
        "the torch drop-in honours it (DDP's fp16 compression hook); Keras' and Lightning's gradients are averaged "
        "in full precision here"
    )),
    "continuous_cols": (None, "it describes columns for NVTabular's data module, which sparkrunner does not use"),
    "categorical_cols": (None, "it describes columns for NVTabular's data module, which sparkrunner does not use"),
    "callbacks": (None, "Horovod's TorchEstimator takes callbacks but never calls them"),
    "shuffle_buffer_size": (None, "deprecated by Horovod; shuffle= says whether rows are shuffled"),
    "partitions_per_process": (10, _READER),
    "train_minibatch_fn": (None, "the training step is sparkrunner's (DDP), which has no hook of Horovod's shape"),
    "transformation_fn": (None, (
        "Horovod applies it to the pandas row groups its Petastorm reader reads; sparkrunner's ranks read numpy "
        "columns in batches of equal count on every rank, which a function that drops, adds or reshapes rows or "
        "columns would break: apply it in Spark before fit, e.g. df.mapInPandas(lambda frames: map(fn, frames), "
        "schema)"
    )),
    "train_reader_num_workers": (2, _READER),
    "val_reader_num_workers": (2, _READER),
    "reader_pool_type": ("thread", _READER),
    "use_gpu": (True, (
        "the torch drop-in honours it; Keras' ranks train on the GPU Spark assigns them (spark.task.resource.gpu."
        "amount), else the CPU; Lightning's: give trainer_args={'accelerator': 'cpu'}"
    )),
    "mp_start_method": (None, _READER),
    "backend_env": (None, "sparkrunner starts the ranks, not Horovod's backend: give Runner's env="),
    "transformation_edit_fields": (None, "it goes with transformation_fn, which is not honoured"),
    "transformation_removed_fields": (None, "it goes with transformation_fn, which is not honoured"),
    "num_gpus": (None, "ranks train on the GPU Spark assigns them (spark.task.resource.gpu.amount)"),
    "loader_num_epochs": (None, _READER),
    "terminate_on_nan": (False, _TRAINER + " (use trainer_args={'detect_anomaly': True} or a callback)"),
    "debug_data_loader": (False, _READER),
    "train_async_data_loader_queue_size": (None, _READER),
    "val_async_data_loader_queue_size": (None, _READER),
}  # fmt: skip
"""Horovod's arguments that sparkrunner has no counterpart for: the value that means what sparkrunner does anyway
(Horovod's default, or "none" where Horovod's default is an empty list), and why another cannot carry over."""

_EMPTY_MEANS_DEFAULT = {"callbacks", "metrics"}


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
        skipped = name in NOT_HONOURED and name not in also_passed
        if skipped or name in not_passed or name == "backend":
            continue
        if name == "store":
            params["store"] = store_path(value)
        elif name in RENAMED:
            if value is not None:
                params[RENAMED[name]] = value
        elif name not in PASSED_ON or value is not None:  # Horovod's None means "its default": use ours
            params[name] = value
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
    own = (
        "the model's own code says it (a LightningModule's configure_optimizers, training_step and self.log)"
    )
    table = {**NOT_HONOURED, **{name: (None, own) for name in not_passed}}
    refused = sorted(
        name
        for name, (default, _) in table.items()
        if name in given and not _is_default(name, given[name], default)
    )
    if refused:
        raise InvalidArgumentError(
            f"{', '.join(refused)}: Horovod's estimator argument(s) that sparkrunner's estimators do not honour, "
            "so leave them out: "
            + "; ".join(f"{name}: {table[name][1]}" for name in refused)
            + " (docs/ml.md, 'Coming from Horovod')"
        )


def _is_default(name: str, value: Any, default: Any) -> bool:
    """None (Horovod's signature's own default for most), the default, or an empty list of callbacks/metrics."""
    if value is None or (name in _EMPTY_MEANS_DEFAULT and len(value) == 0):
        return True
    return bool(value is default or value == default)


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
