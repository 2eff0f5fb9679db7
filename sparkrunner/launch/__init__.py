"""Launchers turn a `Topology` into running rank processes: on the driver (np < 0) or inside barrier tasks.

The folders say where each part runs: `launch/driver/` on the driver only (which launcher a run gets),
`launch/tasks/` in a barrier task only (the task's side of a Spark run), and the modules here in both, or in
a rank.
"""

from __future__ import annotations

from sparkrunner.launch.base import Launcher, RankJob, TaskOutcome

__all__ = ["Launcher", "RankJob", "TaskOutcome"]
