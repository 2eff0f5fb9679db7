"""TensorFlow MultiWorkerMirroredStrategy through sparkrunner: TF_CONFIG wiring and a real Keras training."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparkrunner import Runner
from tests.tensorflow.training import keras_mwms_train

pytest.importorskip("tensorflow")


def tf_config() -> list[dict[str, Any]]:
    return [json.loads(os.environ["TF_CONFIG"]), os.environ.get("TF_USE_LEGACY_KERAS")]


def assert_trained_in_lockstep(result: dict[str, Any], weights_dir: Path) -> None:
    assert result["replicas"] == 2
    assert result["keras"].startswith("tf_keras"), result["keras"]
    loss = result["loss"]
    assert loss[-1] < loss[0] * 0.5, f"loss did not fall: {loss}"
    ranks = [np.load(weights_dir / f"rank{r}.npz") for r in range(2)]
    assert len(ranks[0].files) == 4
    for name in ranks[0].files:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name])


def test_tf_config_names_every_worker_and_this_rank() -> None:
    config, legacy = Runner(np=-3).run(tf_config)
    workers = config["cluster"]["worker"]
    assert len(workers) == 3 and len(set(workers)) == 3
    assert all(w.startswith("127.0.0.1:") for w in workers)
    assert config["task"] == {"type": "worker", "index": 0}
    assert legacy == "1"


@pytest.mark.slow
def test_keras_trains_with_two_local_workers(tmp_path: Path) -> None:
    result = Runner(np=-2).run(keras_mwms_train, str(tmp_path))
    assert_trained_in_lockstep(result, tmp_path)


@pytest.mark.slow
@pytest.mark.spark
def test_keras_trains_in_a_barrier_stage(spark_local: Any, tmp_path: Path) -> None:
    result = Runner(np=2, spark=spark_local).run(keras_mwms_train, str(tmp_path))
    assert_trained_in_lockstep(result, tmp_path)
