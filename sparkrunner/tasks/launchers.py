"""The launchers' side in a barrier task (np > 0): each launcher's task body, by launcher name, and what only a
barrier task runs for mpirun (its task agent, remote-start agent, run-end notice and shutdown)."""

from __future__ import annotations

from collections.abc import Callable

from sparkrunner.common.rank_job import RankJob, ReportFailure, TaskOutcome
from sparkrunner.tasks.direct_task import run_direct_task
from sparkrunner.tasks.mpirun_task import run_mpirun_task
from sparkrunner.tasks.rank_seeds import RankSeeds
from sparkrunner.topology import RankIndex, Topology

TaskSide = Callable[[RankJob, Topology, RankIndex, ReportFailure, RankSeeds], TaskOutcome]
"""Inside the barrier task whose first rank is `index`: start what this task owns and block until it ends. A
launcher whose task holds several processes calls `report_failure` as soon as one fails, so the driver learns
that exit while the task's other processes still run. The seeds (`rank_seeds`) are its ranks' processes, forked
when the task began, for a launcher that starts its ranks itself (none otherwise)."""

TASK_SIDES: dict[str, TaskSide] = {"direct": run_direct_task, "mpirun": run_mpirun_task}

__all__ = ["TASK_SIDES", "TaskSide"]
