"""MLflow's pyfunc face of a model a sparkrunner estimator fitted. Each logged model carries a copy of this file
(in its ``code/`` folder, as a top-level module: it imports nothing of sparkrunner), so it loads wherever MLflow
and the model's framework do: ``mlflow.pyfunc.load_model``, ``mlflow.pyfunc.spark_udf``, ``mlflow models serve``.

A process keeps the few models it used last (`model_cache`, which travels beside this file as
``sparkrunner_model_cache.py``; where sparkrunner is installed its own copy is used).

It takes what the estimator takes: a DataFrame of the feature columns by name (numbers, arrays, ML vectors as
arrays), side by side in the signature's order, or a ready feature matrix; either is cast to the model's own
floating-point type (Spark hands a column of doubles to a float32 module), then the flavor's own pyfunc predicts,
`TORCH_BATCH_ROWS` rows at a time for torch. Whole columns are stacked at once (no Python step per row), and a
process loads a model once while it keeps it: ``spark_udf`` loads it again for every task, which Spark runs in
the same Python workers.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import numpy as np

try:  # one implementation, sparkrunner's where it is installed
    from sparkrunner.ml import model_cache
except ImportError:  # elsewhere, the copy in the model's code/ folder (on sys.path while MLflow loads it)
    import sparkrunner_model_cache as model_cache  # type: ignore[no-redef]

FLAVOR_LOADERS = {
    "pytorch": "mlflow.pytorch",
    "keras": "mlflow.keras.load",
    "tensorflow": "mlflow.tensorflow",
}
"""The flavors whose own pyfunc this one wraps (the flavor is named in the pyfunc config's ``flavor`` key)."""

BACKEND_KEY = "keras_backend"
"""The pyfunc configuration key of a Keras 3 model's backend: it loads on the one it was saved on."""

CUSTOM_OBJECTS = "custom_objects.cloudpickle"
"""A Keras 3 model's ``custom_objects`` (cloudpickle), beside its MLmodel: in scope while it loads."""

TORCH_BATCH_ROWS = 1024
"""Rows per call of a torch model's pyfunc: Spark hands over 10,000-row batches, on which a small convolutional
network runs ~2x slower per row than on 1,024 (docs/benchmarks.md). Keras predicts in batches of its own."""

MODEL_CACHE_COPY = "sparkrunner_model_cache.py"
"""The name `model_cache` has in a logged model's ``code/`` folder."""

MODELS = model_cache.ModelCache()
"""(model path, its files' mtimes, model config) -> the loaded model: the few this process used last
(``SPARKRUNNER_SCORING_*`` in its environment sets how many)."""


class FeatureColumns:
    """``predict(features)`` for MLflow: the feature matrix built from `features`, in the model's dtype, fed to
    the flavor's own pyfunc (`inner`); a DataFrame in gives a DataFrame out, with the input's index."""

    def __init__(self, inner: Any, dtype: Any, batch_rows: int | None = None) -> None:
        self.inner = inner
        self.dtype = dtype
        self.batch_rows = batch_rows

    def get_raw_model(self) -> Any:
        return self.inner.get_raw_model()

    def predict(self, data: Any, params: dict[str, Any] | None = None) -> Any:
        import pandas as pd

        x = feature_matrix(data, self.dtype)
        step = self.batch_rows or max(len(x), 1)
        parts = [self._predict(x[i : i + step], params) for i in range(0, len(x), step)]
        outputs = np.concatenate(parts) if parts else self._predict(x, params)
        if isinstance(data, pd.DataFrame):
            return pd.DataFrame(outputs.reshape(len(data), -1), index=data.index)
        return outputs

    def _predict(self, x: np.ndarray, params: dict[str, Any] | None) -> np.ndarray:
        # MLflow's keras flavor predicts without params (its wrapper takes none)
        return np.asarray(self.inner.predict(x) if params is None else self.inner.predict(x, params))


def feature_matrix(data: Any, dtype: Any = np.float64) -> np.ndarray:
    """``(rows, width)`` in `dtype`: a DataFrame's columns side by side in its order (a number is one column, an
    array or a vector its width), or `data` itself as a matrix."""
    columns = [data[name].to_numpy() for name in data.columns] if hasattr(data, "columns") else [data]
    two_d = [_two_d(values, dtype) for values in columns]
    return two_d[0] if len(two_d) == 1 else np.concatenate(two_d, axis=1)


def _two_d(values: np.ndarray, dtype: Any) -> np.ndarray:
    if values.dtype == object and len(values):  # one array (or list) per row, stacked in one call
        values = np.stack(list(values))
    return np.asarray(values, dtype=dtype).reshape(len(values), -1)


def _load_pyfunc(path: str, model_config: dict[str, Any] | None = None) -> FeatureColumns:
    """What ``mlflow.pyfunc.load_model`` calls (this module is the pyfunc flavor's ``loader_module``): the model
    at `path`, loaded once per process and model files while the process keeps it."""
    key = (os.path.realpath(path), _file_times(path), repr(sorted((model_config or {}).items())))
    limits = model_cache.Limits.from_environment()
    return MODELS.get(key, lambda: _load(path, model_config), limits)


def _load(path: str, model_config: dict[str, Any] | None) -> FeatureColumns:
    conf = _pyfunc_conf(path)
    flavor = str(conf["sparkrunner_flavor"])
    if flavor == "keras":
        _use_keras_backend(conf.get(BACKEND_KEY))
    load = importlib.import_module(FLAVOR_LOADERS[flavor])._load_pyfunc
    with _custom_objects_scope(path):
        inner = load(path, model_config) if flavor == "pytorch" else load(path)
    rows = TORCH_BATCH_ROWS if flavor == "pytorch" else None
    return FeatureColumns(inner, _dtype(flavor, inner.get_raw_model()), rows)


def _file_times(path: str) -> tuple[tuple[str, int], ...]:
    """The modification times (ns) of `path` and the files in it: a model saved again at the same path (or a
    file of it changed) loads again."""
    entries = sorted(os.scandir(path), key=lambda e: e.name) if os.path.isdir(path) else []
    return (("", os.stat(path).st_mtime_ns), *((e.name, e.stat().st_mtime_ns) for e in entries))


def _custom_objects_scope(path: str) -> Any:
    """Keras 3's custom object scope of the objects saved with the model (`CUSTOM_OBJECTS`), if any."""
    import contextlib

    for folder in (os.path.dirname(path.rstrip("/")), path):
        saved = os.path.join(folder, CUSTOM_OBJECTS)
        if os.path.exists(saved):
            import cloudpickle
            import keras

            with open(saved, "rb") as f:
                return keras.saving.custom_object_scope(cloudpickle.load(f))
    return contextlib.nullcontext()


def _pyfunc_conf(path: str) -> dict[str, Any]:
    """The model's pyfunc configuration (its flavor, `BACKEND_KEY`): in its MLmodel, in the folder above or at
    `path` (the files of the flavor)."""
    import yaml

    for folder in (os.path.dirname(path.rstrip("/")), path):
        conf = os.path.join(folder, "MLmodel")
        if os.path.exists(conf):
            with open(conf) as f:
                return dict(yaml.safe_load(f)["flavors"]["python_function"])
    raise FileNotFoundError(f"no MLmodel file at or above {path}")


def _use_keras_backend(backend: str | None) -> None:
    """Keras 3 on `backend` (the one the model was saved on): set before Keras is imported, or a clear error
    where this process already imported it on another."""
    if backend is None:
        return
    keras = sys.modules.get("keras")
    if keras is None:
        os.environ["KERAS_BACKEND"] = backend
    elif keras.backend.backend() != backend:
        raise RuntimeError(
            f"this model was saved on Keras' {backend!r} backend, and this process imported Keras on "
            f"{keras.backend.backend()!r}: load it in a process with KERAS_BACKEND={backend}"
        )


def _dtype(flavor: str, model: Any) -> Any:
    """The floating-point type of the model's first floating-point parameter (float32 when it has none)."""
    if flavor == "pytorch":
        floats = [p.dtype for p in model.parameters() if p.is_floating_point()]
        return np.dtype(str(floats[0]).removeprefix("torch.")) if floats else np.float32
    weights = [w for w in getattr(model, "weights", []) if "float" in str(getattr(w, "dtype", ""))]
    return np.dtype(str(getattr(weights[0].dtype, "name", weights[0].dtype))) if weights else np.float32
