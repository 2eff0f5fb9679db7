"""A warm session's placement: one run's `Placement` on ranks that outlive each run (`Runner.session()`).

To the run it looks like a cold placement whose `start` serves the run on the session's live ranks; the ranks
themselves, launched through an ordinary placement and kept between runs, are the driver's
(`sparkrunner.driver.warm.live_ranks.WarmRanks`, a `LiveRanks` here).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

from sparkrunner.common.rank_job import RankJob
from sparkrunner.placement import Placement

Shape = tuple[str, int, bool | None, int]
"""What the live ranks were launched for: launcher, tasks, hosting Horovod's rendezvous, ranks per task."""


class ServedRun(Protocol):
    """The live ranks a run was served on."""

    placement: Placement
    """Where they run (the placement that launched them)."""

    def lost(self) -> list[int]:
        """The ranks that ended while they were live."""

    def spark_task_ids(self) -> dict[int, int]:
        """Barrier task index -> Spark task id of the tasks that hold them."""


class LiveRanks(Protocol):
    """A warm session's long-lived ranks, as its placements ask them."""

    def live_placement(self, launcher_tasks: tuple[str, int]) -> Placement | None:
        """Where the live ranks run, when they were launched for this launcher and number of tasks."""

    def serve(self, cold: Callable[[], Placement], job: RankJob, shape: Shape, description: str) -> ServedRun:
        """Serve `job` on the live ranks; first launch them in `cold()` when none of this `shape` are live."""

    def run_over(self) -> bool:
        """Every rank of the run in flight reported success and hung up: it is back, waiting."""

    def end_run(self, clean: bool) -> None:
        """The run is over: keep the ranks when it ended cleanly, else tear them down."""


class WarmPlacement:
    """One run's placement in a warm session: `start` serves the run on the live ranks, `stop` keeps them
    unless the run failed. Everything else is answered by the placement the ranks run in."""

    def __init__(
        self, ranks: LiveRanks, cold: Callable[[], Placement], launcher_tasks: tuple[str, int]
    ) -> None:
        self._ranks = ranks
        self._new_cold = cold
        self._launcher_tasks = launcher_tasks
        self._live: ServedRun | None = None
        known = ranks.live_placement(launcher_tasks) or self._cold
        self.driver_host = known.driver_host
        self.bind_host = known.bind_host

    @functools.cached_property
    def _cold(self) -> Placement:
        """A placement for new ranks (made only when needed: a Spark one costs calls to the JVM)."""
        return self._new_cold()

    @property
    def _active(self) -> Placement:
        if self._live is not None:
            return self._live.placement
        return self._ranks.live_placement(self._launcher_tasks) or self._cold

    @property
    def job_group(self) -> str | None:
        return self._active.job_group

    def start(self, job: RankJob, description: str = "") -> None:
        shape = (*self._launcher_tasks, job.uses_horovod, job.ranks_per_task)
        self._live = self._ranks.serve(lambda: self._cold, job, shape, description)

    def failure(self, pid: int | None = None) -> str | None:
        failure = self._active.failure(pid)
        lost = [] if self._live is None else self._live.lost()
        if failure is None and lost:
            return f"rank(s) {lost} of the warm session ended"
        return failure

    def exit_code(self, rank: int, pid: int | None) -> int | None:
        return self._active.exit_code(rank, pid)

    def decommissioning(self, spark_task_ids: dict[int, int]) -> str | None:
        ids = spark_task_ids if self._live is None else self._live.spark_task_ids()
        return self._active.decommissioning(ids)

    def cancelled(self) -> str | None:
        return self._active.cancelled()

    def finished(self) -> bool:
        return self._active.finished() or self._run_over()

    def _run_over(self) -> bool:
        """This run was served and every one of its ranks is back, waiting."""
        return self._live is not None and self._ranks.run_over()

    def stop(self) -> None:
        if self._live is not None:
            self._ranks.end_run(self._run_over())
