"""FSDP2 (`fully_shard`) with torch.distributed.checkpoint sharded saves into the run's checkpoint folder: a run
whose executor is killed resumes from the newest complete sharded checkpoint and ends with the weights of an
uninterrupted run."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from tests.frameworks.fsdp_training import fsdp_checkpointed
from tests.matrix import LAUNCHERS
from tests.recovery.test_resume_spark import run_signalling_rank1s_executor
from tests.recovery.training import EPOCHS, FAILING_EPOCH

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def train(launcher: str, checkpoint_dir: Path) -> dict[str, Any]:
    """The training without any failure: np=-2, `launcher`, the same seeds, checkpoints into `checkpoint_dir`."""
    runner = Runner(
        np=-2, launcher=launcher, tracking=False, progress=False, checkpoint_dir=str(checkpoint_dir)
    )
    return runner.run(fsdp_checkpointed)


@pytest.fixture(scope="module")
def direct_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fsdp-direct")


@pytest.fixture(scope="module")
def uninterrupted(direct_folder: Path) -> dict[str, Any]:
    """The reference, and the launcher direct cell below: the training without any failure."""
    return train("direct", direct_folder)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_fsdp_trains_and_saves_shards(
    tmp_path: Path, uninterrupted: dict[str, Any], direct_folder: Path, launcher: str
) -> None:
    """Placement np=-2: each epoch's sharded checkpoint is complete; the launchers agree on the weights (the
    direct cell is the reference run itself)."""
    folder = direct_folder if launcher == "direct" else tmp_path
    result = uninterrupted if launcher == "direct" else train(launcher, folder)
    assert result["history"] == [(0, e) for e in range(EPOCHS)] and result["resumed_from"] is None
    assert result["weights"] == uninterrupted["weights"]
    kept = sorted(p.name for p in folder.iterdir() if p.name.startswith("sharded-"))
    assert kept == [f"sharded-{step:012d}" for step in (EPOCHS - 1, EPOCHS)], "keep=2 newest complete folders"
    assert all((folder / name / ".metadata").exists() for name in kept)


def test_fsdp_resumes_from_sharded_checkpoint_after_an_executor_jvm_is_killed(
    spark_cluster: Any, tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    """Placement: Spark barrier stage (np=2), launcher direct. In epoch 3 of attempt 0 the test SIGKILLs the
    executor JVM hosting rank 1; attempt 1 loads the epoch-3 shards and finishes."""
    runner, result, killed = run_signalling_rank1s_executor(
        spark_cluster, tmp_path, "wait_for_kill", signal.SIGKILL, train=fsdp_checkpointed
    )
    assert killed, "the executor JVM was never killed"
    assert runner.last_run is not None and len(runner.last_run.attempts) == 2
    assert runner.last_run.attempts[1].resumed_from_step == FAILING_EPOCH
    assert result["resumed_from"] == FAILING_EPOCH
    assert result["history"] == [(0, e) for e in range(FAILING_EPOCH)] + [
        (1, e) for e in range(FAILING_EPOCH, EPOCHS)
    ]
    assert result["weights"] == uninterrupted["weights"], (
        "resumed training must end where an uninterrupted one does"
    )
