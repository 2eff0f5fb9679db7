"""MLflow for fitted models: each epoch's metrics (step = epoch) in the fit's run, and the model itself."""

from __future__ import annotations

import importlib
import shutil
import time
from pathlib import Path
from typing import Any

from sparkrunner.data import columns
from sparkrunner.ml import features, model_cache, requirements, sparkrunner_pyfunc
from sparkrunner.ml.tracking_uri import tracking_uri_for_call


def log_fit(uri: str, run_id: str, history: dict[str, list[float]], name: str | None) -> None:
    """`history`'s metrics by epoch, and the fit's `run_id` as a tag, in the MLflow run `run_id`."""
    import mlflow
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    metrics = [
        Metric(key, float(v), now, epoch) for key, values in history.items() for epoch, v in enumerate(values)
    ]
    tags = [RunTag("sparkrunner.ml.run_id", name)] if name else []
    client = mlflow.MlflowClient(uri)
    for i in range(0, max(len(metrics), 1), 1000):  # MLflow's per-batch metric limit
        client.log_batch(run_id, metrics=metrics[i : i + 1000], tags=tags if i == 0 else [])


def feature_example(df: Any, feature_cols: list[str], rows: int = 2) -> Any:
    """The first `rows` rows' features as the model receives them (a few rows: the signature's example)."""
    import numpy as np

    found = df.select(*[f"`{c}`" for c in feature_cols]).limit(rows).collect()
    return features.matrix([np.array([_numbers(row[c]) for row in found]) for c in feature_cols])


def feature_schema(df: Any, feature_cols: list[str]) -> Any:
    """The signature's inputs: the estimator's feature columns by name, as `fit` and `transform` take them:
    numbers as doubles (floats upcast), arrays and ML vectors as ``Any``. MLflow checks an ``Array`` or vector
    column one row at a time in pandas (3.7 s per 10,000 rows of 64 floats, 60x the ``Any`` check), so
    ``spark_udf`` would score at a fifth of ``predict_batch_udf``; `sparkrunner_pyfunc` casts them itself."""
    from mlflow.types.schema import AnyType, ColSpec, Schema

    fields = {f.name: f.dataType for f in df.schema.fields}

    def spec(name: str) -> ColSpec:
        kind = columns.spark_type_name(fields[name])
        return (
            ColSpec(AnyType(), name)
            if kind == "vector" or kind.startswith("array<")
            else ColSpec("double", name)
        )

    return Schema([spec(c) for c in feature_cols])


def _numbers(value: Any) -> Any:
    return value.toArray() if hasattr(value, "toArray") else value


def log_torch_model(
    uri: str, run_id: str, model: Any, inputs: Any, example: Any, modules: set[str], versions: dict[str, str]
) -> str:
    """Log `model` in MLflow's pytorch flavor (pickled, so any module loads back) into run `run_id`, its pyfunc
    taking the feature columns `inputs` (a schema); `example` (a float32 feature matrix) gives the outputs'
    schema; `modules` are those its pickle refers to (`requirements.loaded_with_modules`), `versions` rank 0's.
    Returns the model's URI."""
    import torch

    with torch.no_grad():
        outputs = model(torch.from_numpy(example)).numpy()
    needs = requirements.pip_requirements({*requirements.FLAVOR_MODULES["pytorch"], *modules}, versions)
    # pickle: any module, any batch size (pt2 is traced at one shape)
    return _log(
        uri, run_id, "pytorch", inputs, example, outputs, needs, pytorch_model=model,
        serialization_format="pickle",
    )  # fmt: skip


def log_keras_model(
    uri: str,
    run_id: str,
    model: Any,
    inputs: Any,
    example: Any,
    versions: dict[str, str],
    custom_objects: dict[str, Any] | None = None,
) -> str:
    """Log a Keras `model` into run `run_id` (MLflow's keras flavor for Keras 3, tensorflow for tf_keras), its
    pyfunc taking the feature columns `inputs`, requiring rank 0's `versions`; returns the model's URI.
    `custom_objects` (with the registered objects the model names) are saved with it and in scope where it loads."""
    from sparkrunner.ml import keras_models

    package = keras_models.package_of(model)
    assert package is not None, "log_keras_model() takes a Keras model"
    flavor = "keras" if package == "keras" else "tensorflow"
    modules = requirements.keras_modules() if flavor == "keras" else requirements.FLAVOR_MODULES[flavor]
    needs = requirements.pip_requirements(modules, versions)
    objects = {**keras_models.registered_in(package, model.to_json()), **(custom_objects or {})}
    return _log(
        uri, run_id, flavor, inputs, example, keras_models.predict(model, example), needs, model=model,
        **({"custom_objects": objects} if objects else {}),
    )  # fmt: skip


def _log(
    uri: str,
    run_id: str,
    flavor: str,
    inputs: Any,
    example: Any,
    outputs: Any,
    needs: list[str],
    **model: Any,
) -> str:
    """The model in `flavor` in run `run_id`, with `sparkrunner_pyfunc` as its pyfunc (feature columns in) and
    `needs` as its pip requirements: named, MLflow infers none (it would load the model again in a subprocess)."""
    import mlflow
    from mlflow.models import ModelSignature, infer_signature

    signature = ModelSignature(inputs=inputs, outputs=infer_signature(example, outputs).outputs)
    saver = _FeatureColumnsFlavor(importlib.import_module(f"mlflow.{flavor}"), flavor)
    # the fit's store for this call only: the user's own tracking URI (set or not) is left as it was
    with tracking_uri_for_call(uri), mlflow.start_run(run_id=run_id, nested=mlflow.active_run() is not None):
        info = mlflow.models.Model.log(
            None, saver, name="model", signature=signature, pip_requirements=needs, **model
        )
    return str(info.model_uri)


class _FeatureColumnsFlavor:
    """A flavor for ``mlflow.models.Model.log``: `flavor`'s own ``save_model``, then `sparkrunner_pyfunc` copied
    into the model's ``code/`` and named as its pyfunc loader (it wraps the flavor's own pyfunc)."""

    def __init__(self, module: Any, name: str) -> None:
        self.module = module
        self.name = name

    def save_model(self, path: str, mlflow_model: Any, **kwargs: Any) -> None:
        from mlflow import pyfunc
        from mlflow.models.model import MLMODEL_FILE_NAME

        signature = kwargs.pop("signature")  # set after: TensorFlow's save_model takes tensor signatures only
        objects = kwargs.pop("custom_objects", None) if self.name == "keras" else None
        self.module.save_model(path=path, mlflow_model=mlflow_model, **kwargs)
        if objects:  # MLflow's keras flavor keeps none: sparkrunner_pyfunc puts these in scope as it loads
            import cloudpickle

            (Path(path) / sparkrunner_pyfunc.CUSTOM_OBJECTS).write_bytes(cloudpickle.dumps(objects))
        mlflow_model.signature = signature
        code = Path(path) / "code"
        code.mkdir(exist_ok=True)
        shutil.copy(sparkrunner_pyfunc.__file__, code / "sparkrunner_pyfunc.py")
        shutil.copy(model_cache.__file__, code / sparkrunner_pyfunc.MODEL_CACHE_COPY)
        conf = mlflow_model.flavors[pyfunc.FLAVOR_NAME]
        conf.update(loader_module="sparkrunner_pyfunc", code="code", sparkrunner_flavor=self.name)
        if self.name == "keras":  # MLflow records it but loads on whichever backend the loading process has
            import keras

            conf[sparkrunner_pyfunc.BACKEND_KEY] = keras.backend.backend()
        mlflow_model.save(str(Path(path) / MLMODEL_FILE_NAME))
