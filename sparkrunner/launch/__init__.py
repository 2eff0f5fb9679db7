"""Launchers turn a `Topology` into running rank processes: on the driver (np < 0) or inside barrier tasks.

The launcher strategies (`direct`, `mpirun`) and what only they share (`base`). Which launcher a run gets is the
driver's (`sparkrunner.driver.launcher_choice`); a launcher's side in a barrier task is in `sparkrunner.tasks`; the
rank job they start in `sparkrunner.common.rank_job`; the rank's environment, the zygote link and the other OS
utilities they use in `sparkrunner.system`.
"""

from __future__ import annotations

from sparkrunner.launch.base import Launcher

__all__ = ["Launcher"]
