"""MLflow for fitted models: each epoch's metrics (step = epoch) in the fit's run, and the model itself."""

from __future__ import annotations

import time
from typing import Any

from sparkrunner.ml import features
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


def _numbers(value: Any) -> Any:
    return value.toArray() if hasattr(value, "toArray") else value


def log_torch_model(uri: str, run_id: str, model: Any, example: Any) -> str:
    """Log `model` in MLflow's pytorch flavor (pickled, so any module loads back) with a signature inferred
    from `example` (a float32 feature matrix) into run `run_id`; returns the model's URI."""
    import mlflow
    import torch
    from mlflow.models import infer_signature

    with torch.no_grad():
        outputs = model(torch.from_numpy(example)).numpy()
    signature = infer_signature(example, outputs)
    # the fit's store for this call only: the user's own tracking URI (set or not) is left as it was
    with tracking_uri_for_call(uri), mlflow.start_run(run_id=run_id, nested=mlflow.active_run() is not None):
        info = mlflow.pytorch.log_model(
            model,
            name="model",
            signature=signature,
            input_example=example[:2],
            serialization_format="pickle",  # any module, any batch size (pt2 is traced at one shape)
        )
    return str(info.model_uri)


def log_keras_model(uri: str, run_id: str, model: Any, example: Any) -> str:
    """Log a Keras `model` into run `run_id` (MLflow's keras flavor for Keras 3, tensorflow for tf_keras) with a
    signature inferred from `example` (a float32 feature matrix); returns the model's URI."""
    import mlflow
    from mlflow.models import infer_signature

    from sparkrunner.ml import keras_models

    signature = infer_signature(example, keras_models.predict(model, example))
    flavor = mlflow.keras if keras_models.package_of(model) == "keras" else mlflow.tensorflow
    with tracking_uri_for_call(uri), mlflow.start_run(run_id=run_id, nested=mlflow.active_run() is not None):
        info = flavor.log_model(model, name="model", signature=signature, input_example=example[:2])
    return str(info.model_uri)
