"""Before a retry on Spark: wait (up to start_timeout) until the executors left, or new ones, have the slots."""

from __future__ import annotations

import time
from typing import Any

from sparkrunner.errors import NotEnoughSlotsError
from sparkrunner.placement.slots import task_slots
from sparkrunner.placement.spark import spark_context

_POLL_S = 0.25


def wait_for_slots(spark: Any, needed: int, timeout_s: float) -> None:
    """Return once the cluster has `needed` task slots; a lost executor is usually replaced within seconds."""
    sc = spark_context(spark)
    deadline = time.monotonic() + timeout_s
    slots = task_slots(sc)
    while slots < needed:
        if time.monotonic() > deadline:
            raise NotEnoughSlotsError(
                f"the next attempt needs {needed} task slots, but after {timeout_s:.0f} s (start_timeout) the "
                f"cluster has {slots}: executors were lost and not replaced"
            )
        time.sleep(_POLL_S)
        slots = task_slots(sc)
