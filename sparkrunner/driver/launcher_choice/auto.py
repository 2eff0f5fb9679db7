"""What ``launcher="auto"`` starts, and why: ``mpirun`` only for code that needs MPI (Horovod over MPI, mpi4py),
``direct`` for everything else, where mpirun would only add its start-up (bench/frameworks.py --launchers)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from sparkrunner.driver.launcher_choice.code_imports import imported_modules
from sparkrunner.errors import LauncherUnavailableError
from sparkrunner.frameworks.horovod_build import horovod_has_mpi
from sparkrunner.launch.direct import DirectLauncher
from sparkrunner.launch.mpirun import MpirunLauncher


@dataclass(frozen=True)
class AutoChoice:
    """The launcher ``auto`` picked for one run and the reason, as the run's log line says it."""

    name: str
    reason: str


def auto_choice(main: object, horovod: bool | None, env: Mapping[str, str]) -> AutoChoice:
    """The launcher for `main` (a function or a `ScriptCall`), given ``Runner(horovod=...)`` and the ranks' `env`."""
    needs_mpi, why = _mpi_need(main, horovod, env)
    if not needs_mpi:
        return AutoChoice(DirectLauncher.name, why)
    missing = mpirun_unavailable()
    if missing is not None:
        return AutoChoice(DirectLauncher.name, f"{why}, but mpirun cannot start here ({missing})")
    return AutoChoice(MpirunLauncher.name, why)


def mpirun_unavailable() -> str | None:
    """Why ``launcher="mpirun"`` cannot start here, or None when it can."""
    try:
        MpirunLauncher().check_available()
    except LauncherUnavailableError as exc:
        return str(exc)
    return None


def _mpi_need(main: object, horovod: bool | None, env: Mapping[str, str]) -> tuple[bool, str]:
    """Whether `main` needs MPI, and why (or why not)."""
    modules = imported_modules(main)
    if modules is not None and "mpi4py" in modules:
        return True, "the code imports mpi4py"
    controller = env.get("HOROVOD_CONTROLLER", os.environ.get("HOROVOD_CONTROLLER", ""))
    if horovod is False:
        return False, "Runner(horovod=False) says the code does not use Horovod, and it imports no mpi4py"
    if controller.lower() == "gloo":
        return False, "HOROVOD_CONTROLLER=gloo runs Horovod without MPI"
    if horovod:
        return True, "Runner(horovod=True) says the code uses Horovod, which runs over MPI under mpirun"
    if modules is None:
        if horovod_has_mpi():
            return (
                True,
                "its code cannot be read (e.g. a module run by name) and Horovod with MPI is installed",
            )
        return (
            False,
            "its code cannot be read (e.g. a module run by name) and Horovod with MPI is not installed",
        )
    if "horovod" in modules:
        return True, "the code imports Horovod, which runs over MPI under mpirun"
    return False, "the code imports neither Horovod nor mpi4py, so it needs no MPI"
