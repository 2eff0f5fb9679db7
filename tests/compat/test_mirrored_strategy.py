"""The MirroredStrategyRunner drop-in: single-machine Keras code trains on every worker under the
MultiWorkerMirroredStrategy the runner enters; the direct launcher (the original has no other), on the driver
(local_mode=True) and in a barrier stage of local-cluster Spark (local_mode=False)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparkrunner.compat import MirroredStrategyRunner
from sparkrunner.errors import InvalidArgumentError
from tests.compat.functions import keras_regression, strategy_kind

pytest.importorskip("tensorflow")


@pytest.mark.spark
def test_two_workers_train_in_lockstep_under_the_runners_strategy(spark_cluster: Any, tmp_path: Path) -> None:
    runner = MirroredStrategyRunner(num_slots=2, local_mode=False, use_gpu=False)
    result = runner.run(keras_regression, weights_dir=str(tmp_path), epochs=3)
    assert result["strategy"] == "multi-worker" and result["replicas"] == 2
    assert result["loss"][-1] < result["loss"][0]
    workers = [np.load(tmp_path / f"worker{w}.npz") for w in range(2)]
    assert len(workers[0].files) == 2  # kernel and bias
    for name in workers[0].files:  # each worker saw its own data: only the all-reduce keeps them equal
        np.testing.assert_array_equal(workers[0][name], workers[1][name])


@pytest.mark.spark
def test_use_custom_strategy_leaves_the_function_outside_any_strategy(spark_cluster: Any) -> None:
    custom = MirroredStrategyRunner(num_slots=2, use_gpu=False, use_custom_strategy=True).run(strategy_kind)
    wrapped = MirroredStrategyRunner(num_slots=2, use_gpu=False).run(strategy_kind)
    assert (custom, wrapped) == ("_DefaultDistributionStrategy", "multi-worker")


@pytest.mark.slow
def test_local_mode_trains_one_worker_on_the_driver(tmp_path: Path) -> None:
    result = MirroredStrategyRunner(num_slots=1, local_mode=True, use_gpu=False).run(
        keras_regression, weights_dir=str(tmp_path), epochs=2
    )
    assert result["strategy"] == "multi-worker" and result["replicas"] == 1
    assert (tmp_path / "worker0.npz").exists()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_slots": 0}, "num_slots must be a positive integer"),
        ({"num_slots": 2, "local_mode": True, "use_gpu": False}, "set num_slots=1"),
        ({"num_slots": 1, "gpu_resource_name": "accelerator"}, "name the GPU resource 'gpu'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        MirroredStrategyRunner(**options).run(strategy_kind)
