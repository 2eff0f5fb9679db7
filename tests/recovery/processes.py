"""Find the executor JVM that hosts a rank, from the process table (the test's own oracle), and kill it."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from tests.helpers import rank_processes
from tests.waiting import poll_until, wait_until


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def rank_pid(rank: int, seconds: float = 60) -> int:
    """The pid of this test session's live rank process `rank` (RANK=<rank> in its environment)."""
    return wait_until(lambda: _find_rank(rank), seconds, f"a process of rank {rank}")


def _find_rank(rank: int) -> int:
    for pid in rank_processes():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        # mpirun's ranks set RANK themselves after they start: their environ has Open MPI's name only
        named = {f"RANK={rank}".encode(), f"OMPI_COMM_WORLD_RANK={rank}".encode()} & set(env)
        if named and "sparkrunner.ranks.bootstrap" in _cmdline(pid):
            return pid
    return 0


def executor_jvm_of(pid: int) -> int:
    """The CoarseGrainedExecutorBackend JVM among `pid`'s ancestors (rank -> Python worker -> daemon -> JVM)."""
    current = pid
    while current > 1:
        if "CoarseGrainedExecutorBackend" in _cmdline(current):
            return current
        current = _parent(current)
    raise AssertionError(f"process {pid} does not run under an executor JVM")


class ExecutorKiller:
    """In the background: once `marker` exists (rank 1 waits there), send `sig` to the executor JVM hosting
    rank 1 (SIGKILL: the executor is lost; SIGPWR: Spark decommissions it, with spark.decommission.enabled)."""

    def __init__(self, marker: Path, seconds: float, sig: signal.Signals = signal.SIGKILL) -> None:
        self.killed: list[int] = []
        self._marker, self._seconds, self._signal = marker, seconds, sig
        self._thread = threading.Thread(target=self._kill_when_waiting, daemon=True)
        self._thread.start()

    def _kill_when_waiting(self) -> None:
        if not poll_until(self._marker.exists, self._seconds):
            return  # join() reports that nothing was signalled
        jvm = executor_jvm_of(rank_pid(1))
        os.kill(jvm, self._signal)
        self.killed.append(jvm)

    def join(self) -> list[int]:
        """The pids killed (none when the marker never appeared)."""
        self._thread.join(timeout=5)
        return self.killed
