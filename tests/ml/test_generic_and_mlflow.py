"""Your own training and predict functions (`FunctionEstimator`), a model from a builder function or an MLflow URI
(`ScoringModel`), and the fitted torch model logged to MLflow: on real ranks (np < 0, launcher "direct"), real
executors and a real MLflow sqlite store; oracles: the generating function, the model's own forward pass, and
the pids that built the model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
import torch
from pyspark.ml import Pipeline, PipelineModel
from pyspark.ml.feature import SQLTransformer

from sparkrunner.ml import FunctionEstimator, FunctionModel, ScoringModel, TorchEstimator
from tests.ml.nets import BIAS, WEIGHTS, forward, least_squares, linear_predict, linear_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_function_estimator_trains_with_your_function_and_scores_with_your_predict(
    spark_ml: Any, store: Path, tracking_uri: str, tmp_path: Path
) -> None:
    """As the last stage of a Pipeline whose first stage marks the validation rows; the fitted model scores
    alone, after its own save/load, and inside the saved and loaded PipelineModel."""
    estimator = FunctionEstimator(
        train_fn=least_squares, predict_fn=linear_predict, feature_cols=["x"], label_cols=["y"], np=-2,
        launcher="direct", store=str(store), tracking=tracking_uri, verbose=0, validation="held_out",
    )  # fmt: skip
    held_out = SQLTransformer(statement="SELECT *, id % 5 = 0 AS held_out FROM __THIS__")
    fitted = Pipeline(stages=[held_out, estimator]).fit(linear_rows(spark_ml, 1000))
    model = fitted.stages[-1]
    weights, train_rows, val_rows = model.getModel()
    np.testing.assert_allclose(weights, [*WEIGHTS, BIAS], atol=1e-4)
    assert (train_rows, val_rows) == (800, 200)  # ids 0..999: every fifth is held out

    test = linear_rows(spark_ml, 200, partitions=2, seed=50)
    expected = [(r["id"], r["y"]) for r in test.collect()]
    model.write().save(str(tmp_path / "function-model"))
    fitted.write().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[-1], FunctionModel)
    for scorer in (model, FunctionModel.load(str(tmp_path / "function-model")), loaded):
        scored = dict((r["id"], r["prediction"]) for r in scorer.transform(test).collect())
        np.testing.assert_allclose([scored[i] for i, _ in expected], [y for _, y in expected], atol=1e-3)


def test_scoring_model_builds_once_per_python_worker(spark_ml: Any, tmp_path: Path) -> None:
    log = tmp_path / "builds.txt"

    def build() -> torch.nn.Module:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        net = torch.nn.Linear(3, 1)
        with torch.no_grad():
            net.weight.copy_(torch.from_numpy(WEIGHTS[None].astype(np.float32)))
            net.bias.fill_(BIAS)
        return net

    model = ScoringModel(builder=build, feature_cols=["x"], batch_size=7)
    test = linear_rows(spark_ml, 600, partitions=6, seed=5)
    for _ in range(2):
        rows = model.transform(test).select("x", "y", "prediction").collect()
        np.testing.assert_allclose([r["prediction"] for r in rows], [r["y"] for r in rows], atol=1e-5)
    pids = log.read_text().split()
    assert len(pids) == len(set(pids)), f"a worker built the model more than once: {pids}"
    assert str(os.getpid()) not in pids and 1 <= len(pids) < 12


def test_the_fitted_model_is_in_mlflow_with_a_signature_and_scores_from_its_uri(
    spark_ml: Any, store: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    users_store = os.environ["MLFLOW_TRACKING_URI"]  # conftest's; the fit logs to another store
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    model = TorchEstimator(
        model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="mse", feature_cols=["x"],
        label_cols=["y"], epochs=3, np=-2, launcher="direct", store=str(store), tracking=tracking_uri, verbose=0,
    ).fit(linear_rows(spark_ml, 400))  # fmt: skip
    assert model.mlflow_model_uri is not None and model.mlflow_run_id is not None
    assert os.environ.get("MLFLOW_TRACKING_URI") == users_store, "the fit changed the user's tracking URI"

    monkeypatch.setenv(
        "MLFLOW_TRACKING_URI", tracking_uri
    )  # never mlflow.set_tracking_uri: it outlives the test
    info = mlflow.models.get_model_info(model.mlflow_model_uri)
    assert info.signature is not None and info.run_id == model.mlflow_run_id
    x = np.random.default_rng(0).random((5, 3), dtype=np.float32)
    loaded = mlflow.pyfunc.load_model(model.mlflow_model_uri)
    np.testing.assert_allclose(
        np.asarray(loaded.predict(x)).reshape(-1), forward(model.getModel(), x)[:, 0], rtol=1e-6
    )

    test = linear_rows(spark_ml, 100, partitions=2, seed=9)
    mine = {r["id"]: r["prediction"] for r in model.transform(test).collect()}
    from_uri = ScoringModel(model_uri=model.mlflow_model_uri, feature_cols=["x"]).transform(test).collect()
    assert {r["id"]: r["prediction"] for r in from_uri} == pytest.approx(mine, rel=1e-6)
