"""The README's main job, run small: it must train to well above chance."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train_digits.py"


def test_digits_demo_trains_on_the_driver(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.INFO, logger="sparkrunner")
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--np", "-2", "--epochs", "4", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[rank 0] epoch 4/4" in out
    accuracy = float(out.split("test accuracy: ")[1].split()[0])
    assert accuracy > 0.8
    # it says where its MLflow run is: the id and the store (conftest's throwaway one)
    assert "MLflow run " in caplog.text and os.environ["MLFLOW_TRACKING_URI"] in caplog.text
    # and, at its end, where the run's HTML report is, on disk and among the MLflow run's artifacts
    ended = [r.getMessage() for r in caplog.records if "; report: " in r.getMessage()]
    assert len(ended) == 1, ended
    report = Path(ended[0].split("; report: ")[1].split(" (artifact ")[0])
    assert report.is_file() and f"(artifact sparkrunner/{report.name})" in ended[0]
