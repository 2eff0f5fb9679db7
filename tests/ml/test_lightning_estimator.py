"""`LightningEstimator.fit` on real ranks (np < 0, and a Spark barrier stage of `local[2]` with launcher
"direct"), in a Pipeline saved and loaded, against oracles outside the code under test: the function that
generated the labels, the fitted module's own forward pass on the driver, and MLflow's store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from pyspark.ml import Pipeline, PipelineModel

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import LightningEstimator, TorchModel
from tests.ml.lightning_nets import LinearRegression, TwoClasses
from tests.ml.nets import BIAS, WEIGHTS, class_rows, forward, linear_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EPOCHS = 12


def estimator(np_: int, store: Path, tracking_uri: str, **params: Any) -> LightningEstimator:
    defaults = dict(
        model=LinearRegression(), feature_cols=["x"], label_cols=["y"], batch_size=16, epochs=EPOCHS,
        validation=0.25, np=np_, launcher="direct", store=str(store), tracking=tracking_uri, verbose=0,
    )  # fmt: skip
    return LightningEstimator(**{**defaults, **params})


def test_fit_in_spark_learns_the_generating_function_and_logs_each_epoch(
    spark_ml: Any, store: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a barrier stage (np=2); np < 0 trains in the Pipeline test and the resume test below."""
    model = estimator(2, store, tracking_uri).fit(linear_rows(spark_ml, 1200))

    trained = model.getModel()
    np.testing.assert_allclose(trained.layer.weight.detach().numpy()[0], WEIGHTS, atol=0.15)
    np.testing.assert_allclose(trained.layer.bias.item(), BIAS, atol=0.15)
    assert len(model.history["train_loss"]) == len(model.history["val_loss"]) == EPOCHS
    assert model.history["val_loss"][-1] < 0.02 < model.history["val_loss"][0]
    logged = mlflow.MlflowClient(tracking_uri).get_metric_history(model.mlflow_run_id, "val_loss")
    assert [m.value for m in sorted(logged, key=lambda m: m.step)] == pytest.approx(model.history["val_loss"])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)  # the fit's store, as a user names it
    loaded = mlflow.pyfunc.load_model(model.mlflow_model_uri)
    x = np.random.default_rng(0).random((5, 3), dtype=np.float32)
    by_column = np.asarray(loaded.predict(pd.DataFrame({"x": list(x)})))  # the signature's feature column
    np.testing.assert_allclose(by_column, forward(trained, x), rtol=1e-6)


def test_in_a_pipeline_saved_and_loaded_scores_on_the_executors(
    spark_ml: Any, store: Path, tracking_uri: str, tmp_path: Path
) -> None:
    """np=-1 (the number of ranks is not the subject) with the batch two ranks of 16 make: the same steps, the
    same gradients averaged; the rows streamed, a validation column (every fourth row). 6 epochs, not
    `EPOCHS`: each epoch is a pass of the training stream and one of the validation stream (a Spark job each),
    and 6 fit the function to within 0.016 of the scored rows' labels (bound 0.15; measured 2026-11-28)."""
    from pyspark.sql import functions as F

    epochs = 6
    stage = estimator(
        -1, store, tracking_uri, validation="is_val", data="stream", batch_size=32, epochs=epochs
    )
    fitted = Pipeline(stages=[stage]).fit(
        linear_rows(spark_ml, 1200).withColumn("is_val", F.col("id") % 4 == 0)
    )
    assert len(fitted.stages[0].history["val_loss"]) == epochs
    fitted.write().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))

    assert isinstance(loaded.stages[0], TorchModel)
    rows = loaded.transform(linear_rows(spark_ml, 200, partitions=2, seed=100)).collect()
    x = np.array([r["x"] for r in rows])
    predictions = np.array([r["prediction"] for r in rows])
    np.testing.assert_allclose(
        predictions, forward(fitted.stages[0].getModel(), x)[:, 0], rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(predictions, [r["y"] for r in rows], atol=0.15)


def test_bad_input_fails_before_any_rank_starts(spark_ml: Any, store: Path, tracking_uri: str) -> None:
    frame = linear_rows(spark_ml, 100)
    with pytest.raises(InvalidArgumentError, match="LightningModule"):
        estimator(-2, store, tracking_uri, model=torch.nn.Linear(3, 1)).fit(frame)
    with pytest.raises(InvalidArgumentError, match="max_epochs"):
        estimator(-2, store, tracking_uri, trainer_args={"max_epochs": 3}).fit(frame)
    with pytest.raises(InvalidArgumentError, match="missing"):
        estimator(-2, store, tracking_uri, label_cols=["missing"]).fit(frame)


def test_a_classifier_named_by_its_probability_rule_scores_classes_and_probabilities(
    spark_ml: Any, store: Path, tracking_uri: str
) -> None:
    """Lightning's loss lives in the module, so `probability="softmax"` says the outputs are logits: `transform`
    appends the class and the softmax, as the fitted module's own forward pass gives them on the driver. np=-1
    (the number of ranks is not the subject) with the batch two ranks of 32 make."""
    params: dict[str, Any] = dict(
        model=TwoClasses(), feature_cols=["a", "b"], label_cols=["label"], validation=None, epochs=6,
        batch_size=64, log_model=False,
    )  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="probability='logits' is unknown"):
        estimator(-2, store, tracking_uri, probability="logits", **params).fit(class_rows(spark_ml, 40))
    model = estimator(-1, store, tracking_uri, probability="softmax", **params).fit(class_rows(spark_ml, 800))

    rows = model.transform(class_rows(spark_ml, 200, partitions=2)).collect()
    x = np.array([[r["a"], r["b"]] for r in rows], dtype=np.float32)
    expected = torch.softmax(torch.from_numpy(forward(model.getModel(), x)), dim=1).numpy()
    np.testing.assert_allclose(np.array([r["probability"] for r in rows]), expected, rtol=1e-5, atol=1e-6)
    assert [r["prediction"] for r in rows] == expected.argmax(axis=1).astype(float).tolist()
    assert np.mean([r["prediction"] == r["label"] for r in rows]) > 0.9


def test_a_fit_whose_rank_dies_resumes_from_its_latest_epoch(
    spark_ml: Any, store: Path, tmp_path: Path, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """np < 0, launcher direct, max_failures=1, the rows materialized, checkpoint_dir on the S3-API server (the
    endpoint and keys in the environment). 400 rows, batch 20: 10 steps per epoch and rank. Rank 1 exits at its
    26th step (epoch 3 of 4) of attempt 0; the retry trains epochs 3 and 4 only (20 steps per rank, counted by a
    `KillPoint` in a Lightning callback, outside the estimator), from the checkpoint the estimator's Lightning
    loop saved in the background for epoch 2, read back from the bucket. (What an executor's loss adds, on
    Spark, is the same for every estimator: tests/recovery/test_resume_spark.py.)"""
    from tests.common.test_checkpoint_folder import objects
    from tests.helpers import leftover_rank_processes
    from tests.ml.lightning_nets import Steps
    from tests.ml.nets import KillPoint, steps_logged

    log = tmp_path / "steps.txt"
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    prefix = s3.new_prefix()
    model = LightningEstimator(
        model=LinearRegression(), callbacks=[Steps(KillPoint(str(log), crash_after=25))], log_model=False,
        feature_cols=["x"], label_cols=["y"], batch_size=20, epochs=4, np=-2, launcher="direct", max_failures=1,
        checkpoint_dir=prefix, store=str(store), tracking=False, verbose=0,
    ).fit(linear_rows(spark_ml, 400))  # fmt: skip
    steps = steps_logged(log)
    assert steps.count((0, 1)) == 26 and steps.count((1, 0)) == steps.count((1, 1)) == 20, steps
    assert len(model.history["train_loss"]) == 4
    assert [n for n in objects(s3, prefix) if n.endswith(".complete")] == [
        "checkpoint-000000000002.pt.complete",
        "checkpoint-000000000003.pt.complete",
    ]
    assert leftover_rank_processes(grace_s=5.0) == {}
