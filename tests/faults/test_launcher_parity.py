"""One outcome whatever the launcher: the same fault gives the same error on `direct` and `mpirun`
(tests/matrix.py), placement np=-2 (ranks on the driver). Each case checks the error type, the cause first,
the signal wording, the rank's own last output, no process left behind and nothing new in the temp dir."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankProcessDiedError, RunTimeoutError
from tests.helpers import leftover_rank_processes
from tests.matrix import LAUNCHERS


@pytest.fixture
def temp_dir_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The run gets a temp dir of its own (TMPDIR, which mpirun and the ranks inherit); it must be as empty
    after the run as before (Open MPI session folders `ompi.*`, host-file folders...). Its listing is the
    oracle, not the library's clean-up, and other sessions' files on this machine cannot blur it."""
    own = tmp_path / "tmp"
    own.mkdir()
    monkeypatch.setenv("TMPDIR", str(own))
    monkeypatch.setattr(tempfile, "tempdir", str(own))
    yield
    assert sorted(os.listdir(own)) == [], f"left in the run's temp dir {own}"


def rank_one_signals_itself(sig: int) -> None:
    """Rank 1 says a last word, then sends itself `sig`; rank 0 waits to be stopped."""
    import time

    if os.environ["RANK"] == "1":
        print("rank 1 last words", flush=True)
        os.kill(os.getpid(), sig)
    time.sleep(300)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_sigkilled_rank_reads_the_same(launcher: str, temp_dir_unchanged: None) -> None:
    with pytest.raises(RankProcessDiedError) as info:
        Runner(np=-2, launcher=launcher, stop_grace_s=1).run(rank_one_signals_itself, signal.SIGKILL)
    error = info.value
    assert (error.rank, error.exit_code, error.signal) == (1, -signal.SIGKILL, "SIGKILL"), str(error)
    assert "exit code -9 (killed by SIGKILL)" in str(error), str(error)
    assert error.output_tail[-1:] == ("rank 1 last words",), error.output_tail
    assert "mpirun noticed" not in str(error), str(error)
    assert leftover_rank_processes(grace_s=10) == {}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_stopped_rank_is_killed_not_waited_on(launcher: str, temp_dir_unchanged: None) -> None:
    grace = 120.0  # far longer than the run: were it spent waiting on the stopped rank, the bound below fails
    started = time.monotonic()
    with pytest.raises(RunTimeoutError):
        Runner(np=-2, launcher=launcher, timeout=20, stop_grace_s=grace).run(
            rank_one_signals_itself, signal.SIGSTOP
        )
    assert time.monotonic() - started < grace, "the stop grace was spent on a rank that cannot act on SIGTERM"
    assert leftover_rank_processes(grace_s=10) == {}
