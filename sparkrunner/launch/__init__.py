"""Launchers turn a `Topology` into running rank processes, on the driver or inside barrier tasks."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from sparkrunner.launch.base import Launcher, RankJob, TaskOutcome
from sparkrunner.launch.direct import DirectLauncher
from sparkrunner.launch.mpirun import MpirunLauncher, horovod_has_mpi

if TYPE_CHECKING:
    from sparkrunner.options import LauncherName

LAUNCHERS: dict[str, type[Launcher]] = {
    launcher.name: launcher for launcher in (DirectLauncher, MpirunLauncher)
}


def auto_launcher_name() -> str:
    """What ``launcher="auto"`` starts: mpirun when mpirun and Horovod-with-MPI are here, else direct."""
    return MpirunLauncher.name if shutil.which("mpirun") and horovod_has_mpi() else DirectLauncher.name


def resolve_launcher(name: LauncherName) -> Launcher:
    """The launcher called `name` (checked by `RunOptions`), "auto" resolved by `auto_launcher_name`."""
    return LAUNCHERS[auto_launcher_name() if name == "auto" else name]()


__all__ = ["LAUNCHERS", "Launcher", "RankJob", "TaskOutcome", "auto_launcher_name", "resolve_launcher"]
