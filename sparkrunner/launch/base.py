"""What every launcher provides (`Launcher`) and the pieces only launchers share: the rank's command and the
closing of what a run's local ranks use once they end. The rank job they start is `sparkrunner.common.rank_job`'s,
the rank's environment `sparkrunner.system.rank_environment`'s."""

from __future__ import annotations

import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

from sparkrunner.common.rank_job import RankJob
from sparkrunner.system import processes
from sparkrunner.topology import PORTS_PER_RANK, Topology


def close_after(ranks: Sequence[processes.RankHandle], *closers: Callable[[], object]) -> None:
    """In the background: once every local rank has ended, call `closers` (driver-hosted services, secrets)."""

    def wait_then_close() -> None:
        try:
            for rank in ranks:
                rank.wait()
        finally:
            for close in closers:
                close()

    threading.Thread(target=wait_then_close, name="sparkrunner-close-after", daemon=True).start()


def worker_command() -> list[str]:
    return [sys.executable, "-m", "sparkrunner.ranks.bootstrap"]


class Launcher(ABC):
    """Starts ranks. `start_local` runs on the driver (np < 0); inside a barrier task (np > 0) the launcher's
    task side runs, found by its `name` in `sparkrunner.tasks.launchers.TASK_SIDES`."""

    name: ClassVar[str]
    ports_per_rank: ClassVar[int] = PORTS_PER_RANK

    def check_available(self) -> None:  # noqa: B027  (optional hook: most launchers run anywhere)
        """Raise `LauncherUnavailableError` before anything starts when this launcher cannot run here."""

    @abstractmethod
    def start_local(self, job: RankJob, topology: Topology) -> list[processes.RankHandle]:
        """Start every rank on this machine and return the processes to supervise."""

    def rank_exit_code(self, output: str, rank: int) -> int | None:
        """What the launcher's own process printed about how `rank` ended (negative: killed by that signal);
        None where each rank is its own process (its exit code says it all)."""
        return None
