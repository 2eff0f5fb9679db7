"""Launchers turn a `Topology` into running rank processes, on the driver or inside barrier tasks."""

from __future__ import annotations

import shutil

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.launch.base import Launcher, RankJob, TaskOutcome
from sparkrunner.launch.direct import DirectLauncher
from sparkrunner.launch.mpirun import MpirunLauncher, horovod_has_mpi

LAUNCHERS: dict[str, type[Launcher]] = {
    launcher.name: launcher for launcher in (DirectLauncher, MpirunLauncher)
}


def resolve_launcher(name: str) -> Launcher:
    """The launcher called `name`; "auto" is mpirun when mpirun and Horovod-with-MPI are here, else direct."""
    if name == "auto":
        return MpirunLauncher() if shutil.which("mpirun") and horovod_has_mpi() else DirectLauncher()
    try:
        return LAUNCHERS[name]()
    except KeyError:
        choices = ", ".join(sorted(["auto", *LAUNCHERS]))
        raise InvalidArgumentError(f"launcher={name!r} is unknown; use one of: {choices}") from None


__all__ = ["LAUNCHERS", "Launcher", "RankJob", "TaskOutcome", "resolve_launcher"]
