"""Which launcher a run gets, chosen on the driver (``launcher="auto"`` reads the run's code for it)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sparkrunner.driver.launcher_choice.auto import auto_choice
from sparkrunner.launch.base import Launcher
from sparkrunner.launch.direct import DirectLauncher
from sparkrunner.launch.mpirun import MpirunLauncher

if TYPE_CHECKING:
    from sparkrunner.options import LauncherName

log = logging.getLogger(__name__)

LAUNCHERS: dict[str, type[Launcher]] = {
    launcher.name: launcher for launcher in (DirectLauncher, MpirunLauncher)
}


def resolve_launcher(
    name: LauncherName, main: object = None, horovod: bool | None = None, env: Mapping[str, str] | None = None
) -> Launcher:
    """The launcher called `name` (checked by `RunOptions`); "auto" picks one for the code `main` (see
    `driver.launcher_choice.auto`) and logs which and why."""
    if name == "auto":
        choice = auto_choice(main, horovod, env or {})
        log.info("launcher='auto' picked %s: %s", choice.name, choice.reason)
        name = choice.name  # type: ignore[assignment]
    return LAUNCHERS[name]()


__all__ = ["LAUNCHERS", "resolve_launcher"]
