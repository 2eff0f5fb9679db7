"""Launchers turn a `Topology` into running rank processes, on the driver or inside barrier tasks."""

from __future__ import annotations

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.launch.base import Launcher, RankJob, TaskOutcome
from sparkrunner.launch.direct import DirectLauncher

LAUNCHERS: dict[str, type[Launcher]] = {DirectLauncher.name: DirectLauncher}


def resolve_launcher(name: str) -> Launcher:
    """The launcher called `name`; "auto" picks the best one available here."""
    if name == "auto":
        return DirectLauncher()
    try:
        return LAUNCHERS[name]()
    except KeyError:
        choices = ", ".join(sorted(["auto", *LAUNCHERS]))
        raise InvalidArgumentError(f"launcher={name!r} is unknown; use one of: {choices}") from None


__all__ = ["LAUNCHERS", "Launcher", "RankJob", "TaskOutcome", "resolve_launcher"]
