"""TensorFlow MultiWorkerMirroredStrategy through sparkrunner: TF_CONFIG wiring and a real Keras training."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparkrunner import Runner
from tests.frameworks.tensorflow.training import keras_mwms_train

pytest.importorskip("tensorflow")


def tf_config() -> tuple[int, dict[str, Any], str | None]:
    from sparkrunner import rank_context

    return rank_context().rank, json.loads(os.environ["TF_CONFIG"]), os.environ.get("TF_USE_LEGACY_KERAS")


def assert_progress_reported(
    runner: Runner, history: list[float], epochs: int = 4, steps_per_epoch: int = 8
) -> None:
    """The Keras callback reported every batch of every epoch, on both ranks, with Keras' loss: at an epoch's
    last batch the running mean over both workers (equal batches), which is Keras' epoch-end `history` value
    (tf_keras sums the workers' running means in its per-batch logs: the callback reports their mean)."""
    assert runner.last_run is not None and runner.last_run.timings is not None
    timings = runner.last_run.timings
    for rank in (0, 1):
        mine = timings[timings["rank"] == rank]
        assert list(mine["step"]) == list(range(1, epochs * steps_per_epoch + 1))
        assert sorted(set(mine["epoch"])) == list(range(epochs))
        assert mine["loss"].notna().all()
        epoch_ends = list(mine["loss"])[steps_per_epoch - 1 :: steps_per_epoch]
        np.testing.assert_allclose(epoch_ends, history, rtol=1e-4)


def assert_trained_in_lockstep(result: dict[str, Any], weights_dir: Path) -> None:
    assert result["replicas"] == 2
    assert result["keras"].startswith("tf_keras"), result["keras"]
    loss = result["loss"]
    assert loss[-1] < loss[0] * 0.5, f"loss did not fall: {loss}"
    ranks = [np.load(weights_dir / f"rank{r}.npz") for r in range(2)]
    assert len(ranks[0].files) == 4
    for name in ranks[0].files:
        np.testing.assert_array_equal(ranks[0][name], ranks[1][name])


def test_tf_config_names_every_worker_and_this_rank(launcher: str) -> None:
    seen = Runner(np=-3, launcher=launcher).run_all(tf_config)
    assert [rank for rank, _, _ in seen] == [0, 1, 2]
    workers = seen[0][1]["cluster"]["worker"]
    assert len(workers) == 3 and len(set(workers)) == 3
    assert all(w.startswith("127.0.0.1:") for w in workers)
    for rank, config, legacy in seen:  # every rank, not only rank 0: one cluster, its own index
        assert config["cluster"]["worker"] == workers
        assert config["task"] == {"type": "worker", "index": rank}
        assert legacy == "1"


@pytest.mark.slow
def test_keras_trains_with_two_local_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Launcher direct: MultiWorkerMirroredStrategy reads only TF_CONFIG, which the test above checks under
    both launchers; the placements differ in the hosts and ports it names (the next test). The run says once
    that tf.keras is sparkrunner's tf_keras default."""
    runner = Runner(np=-2, launcher="direct")
    result = runner.run(keras_mwms_train, str(tmp_path))
    assert_trained_in_lockstep(result, tmp_path)
    assert_progress_reported(runner, result["loss"])
    assert capsys.readouterr().out.count("tf.keras is tf_keras (Keras 2) on the ranks") == 1


@pytest.mark.slow
@pytest.mark.spark
def test_keras_trains_in_a_barrier_stage(spark_local: Any, tmp_path: Path) -> None:
    """Launcher direct: the workers' gRPC servers on the ports the barrier tasks reserved and handed over."""
    runner = Runner(np=2, spark=spark_local, launcher="direct")
    result = runner.run(keras_mwms_train, str(tmp_path))
    assert_trained_in_lockstep(result, tmp_path)
    assert_progress_reported(runner, result["loss"])
