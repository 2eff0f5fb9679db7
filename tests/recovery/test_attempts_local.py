"""Attempts, DoNotRetry, exhausted attempts, graceful stop and crash-safe checkpoints, with ranks on the
driver (np < 0, launcher direct) unless a test says Spark."""

from __future__ import annotations

import os
import pickle
import signal
import time
from pathlib import Path
from typing import Any

import mlflow
import pytest

import sparkrunner
from sparkrunner import Runner
from sparkrunner.errors import (
    AttemptsFailedError,
    CheckpointDirError,
    DoNotRetry,
    InvalidArgumentError,
    RankFailedError,
    RunTimeoutError,
    SparkRunnerError,
)
from tests.helpers import leftover_rank_processes
from tests.recovery.processes import rank_pid
from tests.recovery.stop_saves import saved_state

pytestmark = pytest.mark.timeout(300)


def fails_every_attempt() -> None:
    attempt = sparkrunner.rank_context().attempt
    if sparkrunner.rank_context().rank == 0:
        raise ValueError(f"bad luck on attempt {attempt}")
    time.sleep(60)


@pytest.mark.slow
def test_exhausted_attempts_carry_every_error_and_reach_mlflow() -> None:
    runner = Runner(np=-2, launcher="direct", max_failures=2, stop_grace_s=1, progress=False)
    with pytest.raises(AttemptsFailedError) as info:
        runner.run(fails_every_attempt)
    assert [str(e).splitlines()[0] for e in info.value.errors] == [
        f"rank 0 failed with ValueError: bad luck on attempt {n}" for n in range(3)
    ]
    for n in range(3):
        assert f"attempt {n}: RankFailedError: rank 0 failed with ValueError: bad luck on attempt {n}" in str(
            info.value
        )
    record = runner.last_run
    assert record is not None and [a.number for a in record.attempts] == [0, 1, 2]
    assert all(a.error is not None and a.ended_at is not None for a in record.attempts)
    client = mlflow.MlflowClient()
    run = client.get_run(str(record.mlflow_run_id))
    assert run.data.tags["sparkrunner.attempts"] == "3"
    assert "bad luck on attempt 1" in run.data.tags["sparkrunner.attempt.1.error"]
    failed = client.get_metric_history(run.info.run_id, "attempt.failed")
    assert sorted((m.step, m.value) for m in failed) == [(0, 1.0), (1, 1.0), (2, 1.0)]
    assert leftover_rank_processes(grace_s=5.0) == {}


def refuses_config() -> None:
    if sparkrunner.rank_context().rank == 0:
        raise DoNotRetry(KeyError("no column 'label' in the data"))
    time.sleep(60)


def test_do_not_retry_fails_at_once() -> None:
    runner = Runner(np=-2, launcher="direct", max_failures=3, stop_grace_s=1, tracking=False, progress=False)
    with pytest.raises(RankFailedError, match="no column 'label'") as info:
        runner.run(refuses_config)
    assert isinstance(info.value.original, DoNotRetry)
    assert runner.last_run is not None and len(runner.last_run.attempts) == 1


def test_retry_predicate_decides() -> None:
    seen: list[BaseException] = []

    def only_once(error: BaseException) -> bool:
        seen.append(error)
        return False

    runner = Runner(
        np=-2,
        launcher="direct",
        max_failures=3,
        retry_if=only_once,
        stop_grace_s=1,
        tracking=False,
        progress=False,
    )
    with pytest.raises(RankFailedError, match="bad luck on attempt 0"):
        runner.run(fails_every_attempt)
    assert len(seen) == 1 and runner.last_run is not None and len(runner.last_run.attempts) == 1


def test_spark_runs_that_retry_need_a_checkpoint_dir() -> None:
    with pytest.raises(CheckpointDirError, match="checkpoint_dir="):
        Runner(np=2, launcher="direct", max_failures=1)


def saves_until_stopped(started: str) -> str:
    step = 0
    Path(f"{started}.{sparkrunner.rank_context().rank}").touch()
    while not sparkrunner.stopping():
        step += 1
        time.sleep(0.05)
    sparkrunner.save_checkpoint({"stopped_at": step, "attempt": sparkrunner.rank_context().attempt})
    return "saved"


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["local", "spark"])
def test_timeout_stops_ranks_gracefully_so_they_save(placement: str, tmp_path: Path, request: Any) -> None:
    """launcher direct; np=-2 (local) or a Spark barrier stage of 2 tasks (local-cluster)."""
    np = -2 if placement == "local" else 2
    if placement == "spark":
        request.getfixturevalue("spark_cluster")
        # a barrier stage's first Python workers take a while to start: a first run starts them, so that the
        # timed run's 20 s go to its ranks
        Runner(np=np, launcher="direct", tracking=False, progress=False).run(os.getpid)
    folder = tmp_path / "checkpoints"
    runner = Runner(
        np=np,
        launcher="direct",
        timeout=20,
        stop_grace_s=20,
        checkpoint_dir=str(folder),
        tracking=False,
        progress=False,
    )
    with pytest.raises(RunTimeoutError):
        runner.run(saves_until_stopped, str(tmp_path / "started"))
    assert (tmp_path / "started.0").exists() and (tmp_path / "started.1").exists(), "the ranks never started"
    state = saved_state(folder)
    assert state["attempt"] == 0 and state["stopped_at"] > 0
    assert leftover_rank_processes(grace_s=5.0) == {}


BLOB = 8 * 1024 * 1024


def saves_big_checkpoints(first: int) -> None:
    for step in range(first, first + 1000):
        print(f"saving {step}", flush=True)
        sparkrunner.save_checkpoint({"step": step, "blob": bytes([step % 251]) * BLOB}, step=step, keep=3)


@pytest.mark.slow
def test_a_kill_during_save_never_leaves_a_corrupt_latest_checkpoint(tmp_path: Path) -> None:
    """launcher direct, np=-1: the test SIGKILLs the rank at several moments while it writes 8 MiB checkpoints."""
    import threading

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for first, delay in ((1000, 0.0), (2000, 0.01), (3000, 0.05)):
        runner = Runner(np=-1, launcher="direct", checkpoint_dir=str(folder), tracking=False, progress=False)

        def kill_mid_write(wait: float = delay, first: int = first) -> None:
            pid = rank_pid(0)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # one checkpoint of this run complete, the next being written
                names = [p.name for p in folder.iterdir()]
                writing = any(n.startswith(".checkpoint-writing-") for n in names)
                if writing and any(n.startswith("checkpoint-") and int(n[11:23]) >= first for n in names):
                    break
                time.sleep(0.002)
            time.sleep(wait)
            os.kill(pid, signal.SIGKILL)

        threading.Thread(target=kill_mid_write, daemon=True).start()
        with pytest.raises(
            SparkRunnerError
        ):  # RankFailedError, or "never reported" when the exit is seen first
            runner.run(saves_big_checkpoints, first)
        complete = sorted(p for p in folder.iterdir() if p.name.startswith("checkpoint-"))
        for path in complete:  # every checkpoint visible under its final name is whole
            with open(path, "rb") as f:
                state = pickle.load(f)
            assert state["blob"] == bytes([state["step"] % 251]) * BLOB
            assert path.name == f"checkpoint-{state['step']:012d}.pkl"
    os.environ["SPARKRUNNER_CHECKPOINT_DIR"] = str(folder)
    try:
        latest = sparkrunner.load_checkpoint()
    finally:
        del os.environ["SPARKRUNNER_CHECKPOINT_DIR"]
    assert latest is not None and latest["step"] == max(
        int(p.name[11:23]) for p in folder.iterdir() if p.name.startswith("checkpoint-")
    )
    assert leftover_rank_processes(grace_s=5.0) == {}


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_failures", -1), ("max_failures", 1.5), ("stop_grace_s", -1), ("retry_if", "yes")],
)
def test_bad_recovery_options_are_refused_before_anything_starts(option: str, value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=option):
        Runner(np=-2, launcher="direct", **{option: value})
