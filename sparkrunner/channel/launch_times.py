"""A rank's launch times (`messages.RankLaunch`): its launcher passes its own in the rank's environment as it
starts it, and the rank adds its own and sends them all in `Hello`. A few `time.monotonic()` calls, nothing more."""

from __future__ import annotations

import dataclasses
import os
import time

from sparkrunner.channel import messages as m
from sparkrunner.common.environment import Env


def launcher_variable(task_times: tuple[float, float] | None) -> dict[str, str]:
    """The variable a launcher adds to a rank's environment just before it starts the rank: its barrier task's
    times (began, addresses exchanged; None on the driver) and now."""
    entered, exchanged = task_times if task_times is not None else ("", "")
    return {Env.LAUNCH_TIMES: f"{entered},{exchanged},{time.monotonic()}"}


def rank_launch(interpreter_up: float, imports_done: float) -> m.RankLaunch:
    """This rank's launch times so far (its `connected` is `imports_done` until `at_connect`); its launcher's
    are None where it set none (mpirun) or the variable is not one it wrote."""
    entered, exchanged, spawned = _launcher_times(os.environ.get(Env.LAUNCH_TIMES, ""))
    return m.RankLaunch(entered, exchanged, spawned, interpreter_up, imports_done, imports_done)


def at_connect(hello: m.Hello) -> m.Hello:
    """`hello` with its launch's `connected` set to now: the rank is about to send it."""
    if hello.launch is None:
        return hello
    return dataclasses.replace(hello, launch=dataclasses.replace(hello.launch, connected=time.monotonic()))


def _launcher_times(text: str) -> tuple[float | None, float | None, float | None]:
    parts = text.split(",")
    try:
        entered, exchanged, spawned = (float(part) if part else None for part in parts)
    except ValueError:
        return None, None, None
    return entered, exchanged, spawned
