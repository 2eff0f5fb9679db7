"""Placements decide where ranks run: on the driver (`LocalPlacement`) or in a Spark barrier stage."""

from __future__ import annotations

from typing import Protocol

from sparkrunner.common.rank_job import RankJob


class Placement(Protocol):
    """Starts the ranks somewhere and can tell whether they are still there."""

    driver_host: str
    """The address ranks use to reach the driver channel."""

    bind_host: str
    """The address the driver channel listens on."""

    @property
    def job_group(self) -> str | None:
        """The Spark job group (a job tag on Spark Connect) of the run's barrier job; None without Spark."""

    def start(self, job: RankJob, description: str = "") -> None:
        """Start the ranks; returns at once. `description` names the run in Spark's UI."""

    def failure(self, pid: int | None = None) -> str | None:
        """Why the ranks ended abnormally, once known (exit codes, output tails); None otherwise.

        `pid`: the process of the rank in question, when the placement can tell its processes apart."""

    def exit_code(self, rank: int, pid: int | None) -> int | None:
        """The exit code of `rank`'s process (`pid`) once it ended, where the placement sees it (negative: the
        signal that killed it); None otherwise (barrier tasks report theirs over the channel)."""

    def decommissioning(self, spark_task_ids: dict[int, int]) -> str | None:
        """Which executors running this run's tasks (barrier task index -> Spark task id) Spark is
        decommissioning, once it is; None otherwise, and always where the placement cannot tell."""

    def cancelled(self) -> str | None:
        """How the run's Spark job was cancelled from outside (job group, UI kill link), or None."""

    def finished(self) -> bool:
        """True once every rank process (or the whole Spark job) has ended."""

    def stop(self) -> None:
        """End every rank process of this placement; safe to call more than once."""


class QuietPlacement(Placement):
    """The base of a placement with no cluster to ask (the stand-ins tests and benchmarks run a controller with):
    no Spark job, the loopback address, and nothing to say about failures, exit codes, decommissioned executors
    or cancelled jobs. Subclasses say how they start, finish and stop."""

    driver_host = bind_host = "127.0.0.1"
    job_group = None

    def failure(self, pid: int | None = None) -> str | None:
        return None

    def exit_code(self, rank: int, pid: int | None) -> int | None:
        return None

    def decommissioning(self, spark_task_ids: dict[int, int]) -> str | None:
        return None

    def cancelled(self) -> str | None:
        return None
