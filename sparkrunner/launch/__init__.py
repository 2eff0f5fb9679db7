"""Launchers turn a `Topology` into running rank processes: on the driver (np < 0) or inside barrier tasks.

The launcher strategies (`direct`, `mpirun`), what they share (the rank job, the rank environment, the zygote
link) and, in `launch/driver/`, which launcher a run gets. A launcher's side in a barrier task is in
`sparkrunner.tasks`; the OS utilities they use in `sparkrunner.system`.
"""

from __future__ import annotations

from sparkrunner.launch.base import Launcher, RankJob, TaskOutcome

__all__ = ["Launcher", "RankJob", "TaskOutcome"]
