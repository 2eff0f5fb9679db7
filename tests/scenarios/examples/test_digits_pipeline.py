"""`make demo`'s job, run small (np < 0, 3 epochs): a Spark ML pipeline that learns the digits well above chance,
logs each epoch to MLflow and scores on the executors. It runs on the tests' shared `local[2]` session, which the
job finds, uses and leaves running (its own `local[2]` start would be a JVM start of its own)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import mlflow
import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "digits_pipeline.py"

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_the_demo_pipeline_fits_logs_and_scores(spark_local: Any, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("digits_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--np", "-2", "--epochs", "3"]) == 0
    assert spark_local.sparkContext._jsc is not None, "the job stopped a session it did not start"
    out = capsys.readouterr().out
    said = re.search(r"test accuracy: ([0-9.]+) on (\d+) held-out digits", out)
    assert said is not None, out
    accuracy, held_out = float(said[1]), int(said[2])
    assert accuracy > 0.8
    assert 300 < held_out < 600  # a quarter of the 1,797 digits
    run_id = out.split("MLflow run ")[1].split()[0]
    logged = mlflow.MlflowClient().get_metric_history(run_id, "val_accuracy")  # conftest's throwaway store
    assert sorted(m.step for m in logged) == [0, 1, 2] and max(m.value for m in logged) > 0.8
