"""ml/tracking_uri: the fit's store for one call, and the user's MLFLOW_TRACKING_URI as it was afterwards."""

from __future__ import annotations

import os

import mlflow
import pytest

from sparkrunner.ml.tracking_uri import tracking_uri_for_call


def test_the_users_variable_is_back_after_the_call(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    mine = f"sqlite:///{tmp_path}/mine.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mine)
    with tracking_uri_for_call(f"sqlite:///{tmp_path}/fit.db"):
        assert mlflow.get_tracking_uri().endswith("fit.db")
    assert os.environ.get("MLFLOW_TRACKING_URI") == mine
    assert mlflow.get_tracking_uri() == mine


def test_an_unset_variable_stays_unset(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with tracking_uri_for_call(f"sqlite:///{tmp_path}/fit.db"):
        pass
    assert "MLFLOW_TRACKING_URI" not in os.environ
