"""One outcome whatever the launcher: the same fault gives the same error on `direct` and `mpirun`
(tests/matrix.py), placement np=-2 (ranks on the driver) or np=2 on local-cluster[2,1,1024]. Each case checks
the error type, the cause first, the signal wording, the rank's own last output, no process left behind and
nothing new in the temp dir. Every fault on Spark (and its leftovers: ports, /dev/shm, executors' temp folders):
test_fault_matrix.py."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankProcessDiedError, RunTimeoutError
from sparkrunner.timeouts import EXIT_WAIT_S
from tests.helpers import leftover_rank_processes
from tests.matrix import LAUNCHERS
from tests.scenarios.faults.daemons import ranks_leave_daemons


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


@pytest.mark.slow
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


@pytest.mark.slow
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


DAEMON_LIFE_S = 25.0
"""How long a rank's daemon lives on its own: less than the 30 s a successful run used to wait for its ranks'
launcher, so a run that waits for the daemon (mpirun held up by its output pipe) lets it leave its file."""

PROMPT_END_S = EXIT_WAIT_S / 2
"""The most a run may take to end after its ranks returned: well under the wait a held-up launcher costs."""


def alive(pid: int) -> bool:
    """`pid` runs on this machine (read from /proc here, not through sparkrunner; a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :].split()[0] != b"Z"


def run_leaving_daemons(np: int, launcher: str, folder: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The run returns rank 0's value promptly after its ranks returned (this clock, not the library's record),
    without waiting for the daemons, which do not survive it, and with every rank's last line."""
    folder.mkdir()
    value = Runner(np=np, launcher=launcher, start_timeout=180).run(
        ranks_leave_daemons, str(folder), DAEMON_LIFE_S
    )
    ended = time.monotonic()
    assert value == "0"
    returned = max(float(folder.joinpath(f"returned-{rank}").read_text()) for rank in range(abs(np)))
    assert ended - returned < PROMPT_END_S, f"the run ended {ended - returned:.1f} s after its ranks returned"
    daemons = [int(folder.joinpath(f"pid-{rank}").read_text()) for rank in range(abs(np))]
    assert [pid for pid in daemons if alive(pid)] == [], "a daemon a rank left outlived the run"
    assert leftover_rank_processes() == {}
    assert not [f for f in os.listdir(folder) if f.startswith("daemon-of-")], "the run waited for a daemon"
    out = capfd.readouterr().out  # "[rank N]" is the driver's prefix: the relay forwarded these lines
    assert [f"[rank {rank}] rank {rank} returns" in out for rank in range(abs(np))] == [True] * abs(np), out[
        -2000:
    ]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_daemon_left_by_a_rank_does_not_hold_the_run(
    launcher: str, tmp_path: Path, temp_dir_unchanged: None, capfd: pytest.CaptureFixture[str]
) -> None:
    run_leaving_daemons(-2, launcher, tmp_path / "daemons", capfd)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_daemon_left_by_a_rank_in_spark_does_not_hold_the_run(
    launcher: str,
    spark_cluster: Any,
    tmp_path: Path,
    temp_dir_unchanged: None,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # under mpirun, a bare fork holds task 0's mpirun, which only the driver can tell is done (`RunOver`)
    run_leaving_daemons(2, launcher, tmp_path / "daemons", capfd)
