"""`TorchEstimator.fit` on real ranks (np < 0 and a Spark barrier stage of `local[2]`, launcher "direct") and
`TorchModel.transform` on real executors, against oracles outside the code under test: the function that
generated the labels, the fitted module's own forward pass on the driver, MLflow's store, the process ids
that loaded the model, and a driver result limit that collecting the training rows would break."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cloudpickle
import mlflow
import numpy as np
import pytest
import torch

from sparkrunner.errors import RunTimeoutError
from sparkrunner.ml import TorchEstimator, TorchModel
from sparkrunner.ml.driver.persistence import ModelState
from tests.helpers import leftover_rank_processes
from tests.ml.nets import (
    BIAS,
    WEIGHTS,
    BatchLogged,
    LoadLogged,
    StepLogged,
    StuckOnRankOne,
    class_rows,
    classifier,
    forward,
    linear_rows,
    squared_error,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def regression(np_: int, store: Path, tracking_uri: str, **params: Any) -> TorchEstimator:
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    defaults = dict(
        model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="mse", feature_cols=["x"],
        label_cols=["y"], batch_size=32, epochs=25, validation=0.25, np=np_, launcher="direct",
        store=str(store), tracking=tracking_uri, verbose=0,
    )  # fmt: skip
    return TorchEstimator(**{**defaults, **params})


def test_fit_in_a_barrier_stage_learns_the_generating_function_and_transform_scores_with_it(
    spark_ml: Any, store: Path, tracking_uri: str
) -> None:
    """np=2 on local[2]: the rows materialized for the barrier stage. On np < 0 the estimator's ranks fit the
    streamed classifier below and the Pipeline of tests/ml/test_persistence.py; only the placement differs."""
    model = regression(2, store, tracking_uri).fit(linear_rows(spark_ml, 1200))

    trained = model.getModel()
    np.testing.assert_allclose(trained.weight.detach().numpy()[0], WEIGHTS, atol=0.1)
    np.testing.assert_allclose(trained.bias.item(), BIAS, atol=0.1)
    assert len(model.history["loss"]) == len(model.history["val_loss"]) == 25
    assert model.history["val_loss"][-1] < 0.01 < model.history["val_loss"][0]

    test = linear_rows(spark_ml, 300, partitions=3, seed=100)
    rows = model.transform(test).select("x", "y", "prediction").collect()
    x = np.array([r["x"] for r in rows])
    predictions = np.array([r["prediction"] for r in rows])
    np.testing.assert_allclose(predictions, forward(trained, x)[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(predictions, [r["y"] for r in rows], atol=0.1)

    history = mlflow.MlflowClient(tracking_uri).get_metric_history(model.mlflow_run_id, "val_loss")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(
        model.history["val_loss"]
    )


def test_classifier_on_streamed_rows_gives_probabilities_and_classes(
    spark_ml: Any, store: Path, tracking_uri: str
) -> None:
    net = classifier()
    frame = class_rows(spark_ml, 1600)
    model = TorchEstimator(
        model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="cross_entropy",
        feature_cols=["a", "b"], label_cols=["label"], batch_size=40, epochs=8, validation=0.2, np=-2,
        launcher="direct", data="stream", tracking=tracking_uri, verbose=0,
    ).fit(frame)  # fmt: skip

    assert set(model.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert model.history["val_accuracy"][-1] > 0.9
    rows = model.transform(class_rows(spark_ml, 200, partitions=2)).collect()
    probability = np.array([r["probability"] for r in rows])
    local = torch.softmax(torch.from_numpy(forward(model.getModel(), [[r["a"], r["b"]] for r in rows])), 1)
    np.testing.assert_allclose(probability, local.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probability.sum(axis=1), 1.0, rtol=1e-9)
    assert [r["prediction"] for r in rows] == list(probability.argmax(axis=1).astype(float))
    assert np.mean([r["prediction"] == r["label"] for r in rows]) > 0.9


def test_fit_never_collects_a_dataframe_larger_than_the_driver_result_limit(
    spark_ml: Any, store: Path, tracking_uri: str
) -> None:
    """50k rows of 3 floats and a label: over 1 MiB as collected rows, so collecting them fails here."""
    frame = linear_rows(spark_ml, 50_000, partitions=4, seed=7)
    with pytest.raises(Exception, match="maxResultSize"):
        frame.collect()
    model = regression(1, store, tracking_uri, data="stream", validation=None, batch_size=500, epochs=2).fit(
        frame
    )
    assert len(model.history["loss"]) == 2 and model.history["loss"][-1] < model.history["loss"][0]


def test_transform_loads_the_model_once_per_python_worker(spark_ml: Any, tmp_path: Path) -> None:
    """8 partitions scored twice by 2 task slots: every worker process unpickled the model once, though each
    scored several partitions (the pids are the oracle, written by the model's own unpickling)."""
    log = tmp_path / "loads.txt"
    net = LoadLogged(str(log))
    model = TorchModel(feature_cols=["x"], batch_size=16)
    model.state = ModelState(cloudpickle.dumps(net))
    log.unlink(missing_ok=True)  # only the loads in Spark's workers count
    test = linear_rows(spark_ml, 800, partitions=8, seed=3)
    for _ in range(2):
        rows = model.transform(test).select("x", "prediction").collect()
        x = np.array([r["x"] for r in rows])
        np.testing.assert_allclose([r["prediction"] for r in rows], x @ WEIGHTS + BIAS, rtol=1e-5, atol=1e-5)
    pids = log.read_text().split()
    assert len(pids) == len(set(pids)), f"a worker loaded the model more than once: {pids}"
    assert 1 <= len(pids) < 2 * 8, f"{len(pids)} loads for 16 tasks: the model was not reused across tasks"


def test_backward_passes_per_step_steps_the_optimizer_once_every_that_many_batches(
    spark_ml: Any, store: Path, tmp_path: Path
) -> None:
    """160 rows, every fifth (32) held out for validation by a column: 128 training rows, 2 ranks of batch 8
    give 8 batches per epoch on each rank, cut to 6 by `train_steps_per_epoch`. With 4 backward passes per step
    each rank steps after batches 4 and 6 (the epoch's last): 2 steps per epoch, counted by the optimizer's log.
    `val_batch_size=4`: each rank's 16 validation rows in batches of 4 (without it: 8), 3 of them every epoch
    (`validation_steps_per_epoch`), counted by the model's own log of its passes. A metric function's mean over
    batches and ranks equals the "mse" loss's mean over rows (equal batches)."""
    from pyspark.sql import functions as F

    steps, passes = tmp_path / "steps.txt", tmp_path / "passes.txt"
    model = TorchEstimator(
        model=BatchLogged(str(passes)), optimizer=lambda params: StepLogged(params, str(steps)), loss="mse",
        feature_cols=["x"], label_cols=["y"], batch_size=8, epochs=2, backward_passes_per_step=4,
        validation="held", val_batch_size=4, train_steps_per_epoch=6, validation_steps_per_epoch=3,
        metrics=[squared_error], np=-2, launcher="direct", store=str(store), tracking=False,
        verbose=0,
    ).fit(linear_rows(spark_ml, 160).withColumn("held", F.col("id") % 5 == 0))  # fmt: skip
    assert sorted(steps.read_text().split()) == ["0"] * 4 + ["1"] * 4
    logged = passes.read_text().splitlines()
    assert sorted(set(logged)) == ["eval 4", "train 8"]
    assert (logged.count("train 8"), logged.count("eval 4")) == (2 * 2 * 6, 2 * 2 * 3)
    assert len(model.history["loss"]) == len(model.history["val_loss"]) == 2
    assert set(model.history) == {"loss", "val_loss", "squared_error", "val_squared_error"}
    for name in ("loss", "val_loss"):
        assert model.history[name.replace("loss", "squared_error")] == pytest.approx(
            model.history[name], rel=1e-5
        )


def test_a_fit_past_its_timeout_fails_showing_where_each_rank_was(spark_ml: Any, store: Path) -> None:
    """np < 0, launcher direct: rank 1's first training step never returns; `timeout` ends the fit with
    RunTimeoutError, whose message shows rank 1 in the step and rank 0 waiting in the collective, and no rank
    process is left (the test's own scan of /proc)."""
    estimator = regression(
        -2, store, "", model=StuckOnRankOne(3, 1), epochs=1, validation=None, tracking=False, timeout=20
    )
    with pytest.raises(RunTimeoutError, match="20") as info:
        estimator.fit(linear_rows(spark_ml, 200))
    assert "rank 1: in stuck_here" in str(info.value)
    assert "rank 0: in _engine_run_backward" in str(
        info.value
    )  # its gradients' all-reduce, waiting on rank 1
    assert leftover_rank_processes(grace_s=10) == {}
