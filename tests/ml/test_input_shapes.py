"""Horovod's input contract on a real rank (np=-1, launcher "direct": each rank shapes its own batches, so one
shows it; 15 epochs of 25 batches, the optimizer steps two ranks took in 30) and real executors: with `input_shapes`
each feature column reaches ``forward`` as a tensor of its own shape, in `fit` and in `transform` (also after a
save and load); `label_shapes` shapes the labels; `inmemory_cache_all` trains as well from memory. Oracles: the
function that generated the labels, and a model that refuses any other input shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sparkrunner.ml import LightningEstimator, TorchEstimator, TorchModel
from tests.ml.nets import BIAS, WEIGHTS, TwoInputs, linear_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def two_columns(spark: Any, rows: int, seed: int = 0) -> Any:
    """x: array<float>[3], s: a double; y = x . WEIGHTS + BIAS + 2 s."""
    from pyspark.sql import functions as F

    frame = linear_rows(spark, rows, partitions=2, seed=seed).withColumn("s", F.rand(seed + 7))
    return frame.withColumn("y", F.col("y") + 2 * F.col("s"))


def test_each_feature_column_reaches_forward_in_its_shape_in_fit_and_transform(
    spark_ml: Any, tmp_path: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also the model the fit logs to MLflow (`sparkrunner.ml.shaped_inputs`): `mlflow.pyfunc.load_model` takes
    the feature columns as `transform` does and predicts what it predicts."""
    import mlflow
    import pandas as pd

    net = TwoInputs()
    model = TorchEstimator(
        model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="mse", feature_cols=["x", "s"],
        label_cols=["y"], input_shapes=[[-1, 3, 1], [-1, 1]], label_shapes=[[-1, 1]], inmemory_cache_all=True,
        batch_size=32, epochs=15, np=-1, launcher="direct", store=str(tmp_path / "store"), tracking=tracking_uri,
        verbose=0,
    ).fit(two_columns(spark_ml, 800))  # fmt: skip

    trained = model.getModel()
    np.testing.assert_allclose(trained.x.weight.detach().numpy()[0], WEIGHTS, atol=0.15)
    np.testing.assert_allclose([trained.x.bias.item(), trained.s.weight.item()], [BIAS, 2.0], atol=0.15)
    assert model.getInputShapes() == [[-1, 3, 1], [-1, 1]]
    model.write().save(str(tmp_path / "model"))
    for scorer in (TorchModel.load(str(tmp_path / "model")), model):  # rows: the fitted model's, last
        rows = scorer.transform(two_columns(spark_ml, 100, seed=100)).collect()
        np.testing.assert_allclose([r["prediction"] for r in rows], [r["y"] for r in rows], atol=0.2)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)  # the fit's store (never mlflow.set_tracking_uri)
    assert model.mlflow_model_uri is not None
    logged = mlflow.pyfunc.load_model(model.mlflow_model_uri)
    columns = pd.DataFrame({"x": [list(r["x"]) for r in rows], "s": [r["s"] for r in rows]})
    by_mlflow = np.asarray(logged.predict(columns)).reshape(-1)
    np.testing.assert_allclose(by_mlflow, [r["prediction"] for r in rows], rtol=1e-5, atol=1e-6)


def test_the_lightning_estimator_gives_each_feature_column_in_its_shape(
    spark_ml: Any, tmp_path: Path
) -> None:
    from tests.ml.lightning_nets import TwoInputsModule

    model = LightningEstimator(
        model=TwoInputsModule(), feature_cols=["x", "s"], label_cols=["y"], input_shapes=[[-1, 3, 1], [-1, 1]],
        label_shapes=[[-1, 1]], batch_size=32, epochs=15, np=-1, launcher="direct",
        store=str(tmp_path / "store"), tracking=False, verbose=0,
    ).fit(two_columns(spark_ml, 800))  # fmt: skip

    trained = model.getModel().net
    np.testing.assert_allclose(trained.x.weight.detach().numpy()[0], WEIGHTS, atol=0.15)
    rows = model.transform(two_columns(spark_ml, 100, seed=100)).collect()
    np.testing.assert_allclose([r["prediction"] for r in rows], [r["y"] for r in rows], atol=0.2)
