"""The spec the ranks get: the columns a rank reads, decided in one place for every estimator."""

from __future__ import annotations

from sparkrunner.ml.spec import FitSettings, TrainSpec


def test_a_rank_reads_each_needed_column_once_features_first() -> None:
    settings = FitSettings(feature_cols=("a", "b"), label_cols=("b", "y"), sample_weight_col="w")
    assert settings.columns == ["a", "b", "y", "w"]
    spec = TrainSpec(feature_cols=("x",), label_cols=("y",), payload=b"", probability=None)
    assert spec.columns == ["x", "y"]


def test_horovods_loop_settings_reach_the_spec_and_use_gpu_false_picks_the_cpu() -> None:
    """The Params `TorchEstimator` checks before any rank starts land in the spec the ranks get; the rank's
    device for `use_gpu=False` is the CPU (on a machine with a GPU too: untested here, where there is none)."""
    import torch

    from sparkrunner.ml import TorchEstimator
    from sparkrunner.ml.ranks.training import _device

    estimator = TorchEstimator(
        model=torch.nn.Linear(3, 1), feature_cols=["x"], label_cols=["y"], use_gpu=False,
        gradient_compression="fp16", val_batch_size=5,
    )  # fmt: skip
    spec = estimator._spec(None)  # no shaped columns: the DataFrame is not read
    assert (spec.use_gpu, spec.gradient_compression, spec.val_batch_size) == (False, "fp16", 5)
    assert _device(spec.use_gpu) == torch.device("cpu")
