"""Horovod through both launchers on the driver (np < 0): real mpirun, real Horovod, no Spark job."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest

from sparkrunner import RankFailedError, Runner
from sparkrunner.errors import LauncherUnavailableError
from tests.frameworks.horovod import hvd_functions
from tests.helpers import rank_processes
from tests.matrix import LAUNCHERS


def assert_classic_training(result: dict, checkpoint_dir: Path, np: int) -> None:
    """Same weights on every rank, training moved them, and only rank 0 wrote checkpoints."""
    assert result["size"] == np
    first, *others = result["weights"]
    assert all(w == pytest.approx(first, abs=1e-6) for w in others)
    assert first != pytest.approx(result["initial"], abs=1e-4)
    assert sorted(p.name for p in checkpoint_dir.iterdir()) == ["rank0-epoch0.pt", "rank0-epoch1.pt"]


@pytest.mark.slow
def test_auto_runs_horovod_code_under_mpirun(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sparkrunner")
    runner = Runner(np=-2, tracking=False, timeout=120)
    assert runner.run(hvd_functions.controller) == {"controller": "mpi", "size": 2}
    assert runner.last_run is not None and runner.last_run.launcher == "mpirun"
    assert "launcher='auto' picked mpirun: the code imports Horovod" in caplog.text


@pytest.mark.slow
def test_auto_leaves_horovod_on_gloo_under_direct_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sparkrunner")
    runner = Runner(np=-2, tracking=False, timeout=120, env={"HOROVOD_CONTROLLER": "gloo"})
    assert runner.run(hvd_functions.controller) == {"controller": "gloo", "size": 2}
    assert runner.last_run is not None and runner.last_run.launcher == "direct"
    assert "launcher='auto' picked direct: HOROVOD_CONTROLLER=gloo" in caplog.text


def test_mpirun_missing_is_a_typed_error_before_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LauncherUnavailableError, match="mpirun on PATH"):
        Runner(np=-2, launcher="mpirun").run(hvd_functions.sum_ranks)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_classic_horovod_training_runs_unchanged(launcher: str, tmp_path: Path) -> None:
    """The training, and its Horovod timeline (HOROVOD_TIMELINE) sent back to the driver, complete: the
    worker shut Horovod down before sending it."""
    checkpoints, timeline = tmp_path / "checkpoints", tmp_path / "rank-host" / "timeline.json"
    checkpoints.mkdir()
    timeline.parent.mkdir()
    runner = Runner(np=-2, launcher=launcher, env={"HOROVOD_TIMELINE": str(timeline)})
    result = runner.run(hvd_functions.classic_train, str(checkpoints))
    assert_classic_training(result, checkpoints, 2)
    assert result["controller"] == ("mpi" if launcher == "mpirun" else "gloo")
    saved = Path(runner.received_files["rank 0/timeline.json"])
    assert saved.parent != timeline.parent
    events = json.loads(saved.read_text())
    assert any("ALLREDUCE" in str(e.get("name", "")) for e in events)
    os.remove(saved)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_failing_rank_raises_its_own_error_and_leaves_nothing(launcher: str) -> None:
    with pytest.raises(RankFailedError) as info:
        Runner(np=-3, launcher=launcher, timeout=120).run(hvd_functions.fail_on_rank_one)
    err = info.value
    assert (err.rank, err.exc_type) == (1, "ValueError")
    assert "fail_on_rank_one" in err.remote_traceback
    run_id = re.search(r"run (\w+)", err.exc_message).group(1)  # type: ignore[union-attr]
    assert rank_processes(run_id) == {}
