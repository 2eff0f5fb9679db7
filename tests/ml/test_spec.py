"""The spec the ranks get: the columns a rank reads, decided in one place for every estimator."""

from __future__ import annotations

from sparkrunner.ml.spec import FitSettings, TrainSpec


def test_a_rank_reads_each_needed_column_once_features_first() -> None:
    settings = FitSettings(feature_cols=("a", "b"), label_cols=("b", "y"), sample_weight_col="w")
    assert settings.columns == ["a", "b", "y", "w"]
    spec = TrainSpec(feature_cols=("x",), label_cols=("y",), payload=b"", probability=None)
    assert spec.columns == ["x", "y"]
