"""Recovery on real Spark (local-cluster[2,1,1024]: two executor JVMs): a failed attempt resumes from the
latest checkpoint in a new barrier stage, after a rank's exit, an executor JVM's SIGKILL, or Spark's graceful
decommissioning of an executor (SIGPWR to its JVM, as a cloud's spot-reclaim notice or a drained worker gives)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sparkrunner
from sparkrunner import Runner
from sparkrunner.errors import ExecutorDecommissionedError, RankFailedError, RunTimeoutError
from sparkrunner.ml import TorchEstimator
from sparkrunner.placement.slots import task_slots
from tests.common.test_checkpoint_folder import objects
from tests.data.s3_server import S3Server
from tests.helpers import leftover_rank_processes
from tests.matrix import MPIRUN
from tests.ml.nets import CrashOnce, KillPoint, linear_rows, steps_logged
from tests.recovery.processes import ExecutorKiller
from tests.recovery.stop_saves import rank0_saves_on_stop, saved_state
from tests.recovery.training import EPOCHS, FAILING_EPOCH, ddp_checkpointed
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def uninterrupted() -> dict[str, Any]:
    """The reference: the same training without any failure (direct launcher, np=-2, same seeds)."""
    return Runner(np=-2, launcher="direct", tracking=False, progress=False).run(ddp_checkpointed)


def assert_resumed_at_failing_epoch(
    runner: Runner, result: dict[str, Any], reference: dict[str, Any]
) -> None:
    record = runner.last_run
    assert record is not None and len(record.attempts) == 2
    first, second = record.attempts
    assert first.error is not None and second.error is None
    assert second.resumed_from_step == FAILING_EPOCH
    before = [(0, e) for e in range(FAILING_EPOCH)]
    after = [(1, e) for e in range(FAILING_EPOCH, EPOCHS)]
    assert result["history"] == before + after, (
        "attempt 1 must run exactly the epochs attempt 0 did not finish"
    )
    assert result["weights"] == reference["weights"], (
        "resumed training must end where an uninterrupted one does"
    )


def wait_for_slots(spark: Any, needed: int = 2, seconds: float = 120) -> None:
    wait_until(lambda: task_slots(spark.sparkContext) >= needed, seconds, f"{needed} task slots")


def run_signalling_rank1s_executor(
    spark: Any,
    tmp_path: Path,
    failure: str,
    sig: signal.Signals,
    train: Callable[[str, str], dict[str, Any]] = ddp_checkpointed,
    **options: Any,
) -> tuple[Runner, dict[str, Any], list[int]]:
    """Run the checkpointed training `train` (np=2, launcher direct, max_failures=1); once rank 1 waits in
    epoch 3 of attempt 0, send `sig` to the executor JVM hosting it. Returns the runner, rank 0's result and
    the JVMs signalled."""
    marker = tmp_path / "rank1-waits"
    runner = Runner(
        np=2,
        launcher="direct",
        max_failures=1,
        checkpoint_dir=str(tmp_path / "checkpoints"),
        start_timeout=180,
        tracking=False,
        progress=False,
        **options,
    )
    signaller = ExecutorKiller(marker, seconds=300, sig=sig)
    try:
        result = runner.run(train, failure, str(marker))
    finally:
        signalled = signaller.join()
        wait_for_slots(spark)  # leave the shared session with both executors for the next test
    return runner, result, signalled


@pytest.mark.parametrize("launcher", MPIRUN)
def test_ddp_resumes_after_a_rank_exits(
    spark_cluster: Any, tmp_path: Path, uninterrupted: dict[str, Any], launcher: str, caplog: Any
) -> None:
    """Placement: Spark barrier stage (np=2), launcher mpirun, a local folder. Rank 1 os._exit()s in epoch 3 of
    attempt 0 only. (launcher direct: the next test, on an object store.)"""
    runner = Runner(
        np=2, launcher=launcher, max_failures=1, checkpoint_dir=str(tmp_path), tracking=False, progress=False
    )
    result = runner.run(ddp_checkpointed, "exit")
    assert_resumed_at_failing_epoch(runner, result, uninterrupted)
    said = [r.getMessage() for r in caplog.records if r.name.startswith("sparkrunner.")]
    assert any(m.startswith("attempt 0 failed") for m in said), said
    assert any(m.startswith("attempt 1 started") for m in said), said
    assert leftover_rank_processes(grace_s=5.0) == {}


@pytest.mark.parametrize("launcher", MPIRUN)
def test_a_timeout_gives_the_saving_rank_its_grace_under_mpirun(
    spark_cluster: Any, tmp_path: Path, launcher: str
) -> None:
    """Placement: Spark barrier stage (np=2), launcher mpirun; rank 0 alone saves in `on_stop` (1.5 s), rank 1
    never looks at stops. Stopped by `timeout`, the save is complete (Open MPI would have killed rank 0 when
    rank 1 exited) and a next run loads it. (direct in a barrier stage: test_attempts_local.py's
    test_timeout_stops_ranks_gracefully_so_they_save[spark]; np<0: test_stop_saves.py.)"""
    folder = tmp_path / "checkpoints"
    runner = Runner(
        np=2, launcher=launcher, timeout=20, stop_grace_s=20, checkpoint_dir=str(folder), tracking=False,
        progress=False,
    )  # fmt: skip
    with pytest.raises(RunTimeoutError):
        runner.run(rank0_saves_on_stop, str(tmp_path / "started"))
    assert (tmp_path / "started.0").exists() and (tmp_path / "started.1").exists(), "the ranks never started"
    state = saved_state(folder)
    assert state["step"] > 0
    loads = Runner(np=-1, launcher="direct", checkpoint_dir=str(folder), tracking=False, progress=False)
    assert loads.run(sparkrunner.load_checkpoint) == state
    assert leftover_rank_processes(grace_s=5.0) == {}


def test_ddp_resumes_from_an_s3_checkpoint_dir_after_a_rank_is_killed(
    spark_cluster: Any, s3: S3Server, uninterrupted: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Placement: Spark barrier stage (np=2), launcher direct, checkpoint_dir on the S3-API server. Rank 1
    SIGKILLs itself in epoch 3 of attempt 0; attempt 1 resumes from the bucket and ends where an uninterrupted
    run does. The executors get the server's endpoint and keys by `env=`, as a cluster's environment or
    instance profile gives them; the bucket is read by the test with pyarrow's S3 filesystem."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    prefix = s3.new_prefix()
    aws = {name: os.environ[name] for name in os.environ if name.startswith("AWS_")}
    runner = Runner(
        np=2,
        launcher="direct",
        max_failures=1,
        checkpoint_dir=prefix,
        env=aws,
        tracking=False,
        progress=False,
    )
    result = runner.run(ddp_checkpointed, "sigkill")
    assert_resumed_at_failing_epoch(runner, result, uninterrupted)
    assert objects(s3, prefix) == [
        f"checkpoint-{step:012d}.pt{suffix}" for step in (EPOCHS - 1, EPOCHS) for suffix in ("", ".complete")
    ]
    assert leftover_rank_processes(grace_s=5.0) == {}


def test_ddp_resumes_after_an_executor_jvm_is_killed(
    spark_cluster: Any, tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    """Placement: Spark barrier stage (np=2), launcher direct. In epoch 3 of attempt 0 the test SIGKILLs the
    executor JVM that hosts rank 1; the next attempt runs on the executor left and the one Spark brings back."""
    runner, result, killed = run_signalling_rank1s_executor(
        spark_cluster, tmp_path, "wait_for_kill", signal.SIGKILL
    )
    assert killed, "the executor JVM was never killed"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)
    assert_resumed_at_failing_epoch(runner, result, uninterrupted)
    assert runner.last_run is not None
    first_error = str(runner.last_run.attempts[0].error)
    assert "was lost" in first_error and "SIGKILL" in first_error, (
        "attempt 0's error must say that an executor was lost, and how, not only Spark's barrier-stage line"
    )
    assert leftover_rank_processes(grace_s=5.0) == {}


def test_a_decommissioned_executor_stops_ranks_gracefully_and_the_run_resumes_from_their_save(
    spark_cluster: Any, tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    """Placement: Spark barrier stage (np=2), launcher direct, spark.decommission.enabled. In epoch 3 of attempt
    0 the test sends SIGPWR to the executor JVM hosting rank 1; Spark decommissions it, the driver stops every
    rank gracefully, rank 0 saves a checkpoint in its grace period, and attempt 1 resumes from that one."""
    runner, result, signalled = run_signalling_rank1s_executor(
        spark_cluster, tmp_path, "save_on_stop", signal.SIGPWR, stop_grace_s=30
    )
    assert signalled, "the executor JVM was never sent SIGPWR"
    assert_resumed_at_failing_epoch(runner, result, uninterrupted)
    assert result["resumed_from_stop"], "attempt 1 must resume from the checkpoint rank 0 saved when stopped"
    assert runner.last_run is not None
    first_error = runner.last_run.attempts[0].error
    assert isinstance(first_error, ExecutorDecommissionedError), repr(first_error)
    assert "decommissioning executor" in str(first_error) and "barrier task 1" in str(first_error)
    assert leftover_rank_processes(grace_s=5.0) == {}


def fails_on_rank_one() -> None:
    if os.environ["RANK"] == "1":
        raise ValueError("rank 1 always fails")
    time.sleep(60)


def test_max_failures_zero_raises_the_first_error_as_before(spark_cluster: Any) -> None:
    """Placement: Spark barrier stage (np=2), launcher direct; the default max_failures=0."""
    runner = Runner(np=2, launcher="direct", tracking=False, progress=False)
    with pytest.raises(RankFailedError) as info:
        runner.run(fails_on_rank_one)
    assert info.value.rank == 1 and info.value.exc_type == "ValueError"
    assert runner.last_run is not None and len(runner.last_run.attempts) == 1
    assert leftover_rank_processes(grace_s=5.0) == {}


def test_an_estimator_fit_resumes_from_its_latest_epoch_after_an_executor_jvm_is_killed(
    spark_cluster: Any, store: Path, tmp_path: Path
) -> None:
    """Placement: Spark barrier stage (np=2), launcher direct, max_failures=1, the rows materialized. 400 rows,
    batch 20: 10 steps per epoch and rank. At rank 1's 26th step (epoch 3 of 4) of attempt 0 the test SIGKILLs
    the executor JVM that hosts it; the retry trains epochs 3 and 4 only (20 steps per rank, counted by a
    `KillPoint` in the model's forward pass, outside the estimator), from the checkpoint of epoch 2.

    TorchEstimator alone: what an executor's loss touches is the same for every estimator (the fit's
    materialized rows kept for the retry, a new barrier stage, the run's checkpoint folder). Each estimator's own
    resume from its checkpoint is tested where a rank dies on the driver (np < 0): KerasEstimator's in
    tests/ml/test_keras_estimator.py, LightningEstimator's in tests/ml/test_lightning_estimator.py;
    FunctionEstimator's train_fn resumes through ``sparkrunner.load_checkpoint`` as the Runner tests above do."""
    log, marker = tmp_path / "steps.txt", tmp_path / "rank1-waits"
    killer = ExecutorKiller(marker, seconds=300)
    try:
        model = TorchEstimator(
            model=CrashOnce(KillPoint(str(log), crash_after=25, marker=str(marker))), loss="mse",
            log_model=False, feature_cols=["x"], label_cols=["y"], batch_size=20, epochs=4, np=2,
            launcher="direct", max_failures=1, checkpoint_dir=str(tmp_path / "checkpoints"), store=str(store),
            tracking=False, verbose=0,
        ).fit(linear_rows(spark_cluster, 400))  # fmt: skip
    finally:
        killed = killer.join()
        wait_for_slots(spark_cluster)  # leave the shared session with both executors for the next test
    assert killed, "the executor JVM was never killed"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)
    steps = steps_logged(log)
    assert steps.count((0, 1)) == 26 and steps.count((1, 0)) == steps.count((1, 1)) == 20, steps
    assert len(model.history["loss"]) == 4
    assert leftover_rank_processes(grace_s=5.0) == {}
