"""Ranks save and load checkpoints on the real S3-API server (moto), and in the background; ranks on the driver
(np < 0, launcher direct: the checkpoint code is the rank's own, whichever launcher started it). The bucket is
read by the test with pyarrow's S3 filesystem and torch, not with the code under test. The Spark run that
resumes from the bucket after a killed rank is in test_resume_spark.py."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import sparkrunner
from sparkrunner import Runner
from sparkrunner.errors import CheckpointDirError, RankFailedError, SparkRunnerError
from tests.common.test_checkpoint_folder import objects
from tests.data.s3_server import S3Server
from tests.helpers import leftover_rank_processes
from tests.recovery.processes import rank_pid

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def on_s3(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix; the endpoint and keys in the environment, as a user's driver and executors have them."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    return s3.new_prefix()


def runner(checkpoint_dir: str, np: int = -2, **options: Any) -> Runner:
    return Runner(
        np=np, launcher="direct", checkpoint_dir=checkpoint_dir, tracking=False, progress=False, **options
    )


def saves_and_loads() -> dict[str, Any]:
    """Rank 0 saves four steps keeping two (and loads the latest); every rank saves its own twice keeping one,
    and loads it."""
    for step in range(4):
        sparkrunner.save_checkpoint({"step": step}, step=step, keep=2)
    me = sparkrunner.rank_context().rank
    for step in range(2):
        sparkrunner.save_checkpoint({"rank": me, "step": step}, step=step, keep=1, every_rank=True)
    shared = sparkrunner.load_checkpoint() if me == 0 else None
    return {"shared": shared, "own": sparkrunner.load_checkpoint(every_rank=True)}


@pytest.mark.slow
def test_ranks_save_load_and_prune_on_the_s3_server(s3: S3Server, on_s3: str) -> None:
    per_rank = runner(on_s3).run_all(saves_and_loads)
    assert per_rank == [
        {"shared": {"step": 3}, "own": {"rank": 0, "step": 1}},
        {"shared": None, "own": {"rank": 1, "step": 1}},
    ]
    stored = objects(s3, on_s3)
    checkpoints = [name for name in stored if not name.startswith(".sparkrunner-probe")]
    assert checkpoints == [
        "checkpoint-000000000002.pkl",
        "checkpoint-000000000002.pkl.complete",
        "checkpoint-000000000003.pkl",
        "checkpoint-000000000003.pkl.complete",
        "rank0/checkpoint-000000000001.pkl",
        "rank0/checkpoint-000000000001.pkl.complete",
        "rank1/checkpoint-000000000001.pkl",
        "rank1/checkpoint-000000000001.pkl.complete",
    ]
    assert checkpoints == stored, "the driver removes its probe when the run ends"


def saves_in_the_background_and_changes_the_tensor() -> list[float]:
    import torch

    weights = torch.arange(4.0)
    sparkrunner.save_checkpoint({"weights": weights}, step=1, background=True)
    weights.add_(100.0)  # training goes on at once: the save must hold the values of the call
    return weights.tolist()


@pytest.mark.slow
def test_a_background_save_keeps_the_values_of_its_call_and_main_waits_for_it(
    s3: S3Server, on_s3: str
) -> None:
    import torch

    after = runner(on_s3, np=-1).run(saves_in_the_background_and_changes_the_tensor)
    assert after == [100.0, 101.0, 102.0, 103.0]
    with s3.filesystem().open_input_stream(f"{on_s3.removeprefix('s3://')}/checkpoint-000000000001.pt") as f:
        saved = torch.load(io.BytesIO(f.read()), weights_only=True)
    assert saved["weights"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert "checkpoint-000000000001.pt.complete" in objects(s3, on_s3), "main ended before its save did"


class PicklesBadly:
    """Copied by the snapshot, but its serialisation (on the background thread) fails."""

    def __deepcopy__(self, memo: Any) -> PicklesBadly:
        return self

    def __reduce__(self) -> Any:
        raise OSError("the disk is full")


def a_failed_background_write_is_raised_by_the_next_save() -> str:
    sparkrunner.save_checkpoint({"bad": PicklesBadly()}, step=1, background=True)
    try:
        sparkrunner.save_checkpoint({"good": 1}, step=2, background=True)
    except CheckpointDirError as exc:
        return f"{exc} <- {exc.__cause__!r}"
    return "not raised"


def ends_with_a_failed_background_write() -> None:
    sparkrunner.save_checkpoint({"bad": PicklesBadly()}, step=1, background=True)


@pytest.mark.slow
def test_a_failed_background_write_is_never_dropped(tmp_path: Path) -> None:
    """By the next save, or, when `main` ends first, as the rank's error (np<0 default folder)."""
    said = runner(str(tmp_path), np=-1).run(a_failed_background_write_is_raised_by_the_next_save)
    assert said.startswith("the background checkpoint save failed") and "the disk is full" in said, said
    with pytest.raises(RankFailedError, match="the background checkpoint save failed"):
        runner(str(tmp_path / "second"), np=-1).run(ends_with_a_failed_background_write)


def writes_a_marker(path: str) -> None:
    Path(path).touch()


@pytest.mark.slow
def test_an_unreachable_bucket_fails_before_any_rank_starts(on_s3: str, tmp_path: Path) -> None:
    marker = tmp_path / "rank-ran"
    with pytest.raises(
        CheckpointDirError, match=r"s3://no-such-bucket-for-sparkrunner/run.*cannot be written"
    ):
        runner("s3://no-such-bucket-for-sparkrunner/run", np=-1).run(writes_a_marker, str(marker))
    assert not marker.exists()


@pytest.mark.slow
def test_a_rank_that_cannot_reach_the_store_fails_at_its_probe(on_s3: str, tmp_path: Path) -> None:
    """The driver reaches the server; the rank is given an endpoint where nothing listens."""
    marker = tmp_path / "rank-ran"
    closed = runner(on_s3, np=-1, env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"})
    with pytest.raises(RankFailedError, match=rf"CheckpointDirError.*{on_s3}.*cannot be reached"):
        closed.run(writes_a_marker, str(marker))
    assert not marker.exists(), "main ran though the checkpoint folder was out of reach"


BLOB = 8 * 1024 * 1024


def saves_big_checkpoints() -> None:
    for step in range(1000):
        print(f"saving {step}", flush=True)
        sparkrunner.save_checkpoint({"step": step, "blob": bytes([step % 251]) * BLOB}, step=step, keep=3)


def load_outside_a_rank(location: str) -> Any:
    os.environ["SPARKRUNNER_CHECKPOINT_DIR"] = location
    try:
        return sparkrunner.load_checkpoint()
    finally:
        del os.environ["SPARKRUNNER_CHECKPOINT_DIR"]


@pytest.mark.slow
def test_a_save_cut_short_on_the_store_is_never_loaded(s3: S3Server, on_s3: str) -> None:
    """The test SIGKILLs the rank while it uploads 8 MiB checkpoints; the newest complete one loads whole."""

    def kill_mid_upload() -> None:
        pid = rank_pid(0)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "checkpoint-000000000002.pkl.complete" not in objects(
            s3, on_s3
        ):
            time.sleep(0.01)
        time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)

    threading.Thread(target=kill_mid_upload, daemon=True).start()
    with pytest.raises(SparkRunnerError):
        runner(on_s3, np=-1).run(saves_big_checkpoints)
    complete = [n[: -len(".complete")] for n in objects(s3, on_s3) if n.endswith(".pkl.complete")]
    latest = load_outside_a_rank(on_s3)
    assert f"checkpoint-{latest['step']:012d}.pkl" == max(complete)
    assert latest["blob"] == bytes([latest["step"] % 251]) * BLOB
    assert leftover_rank_processes(grace_s=5.0) == {}
