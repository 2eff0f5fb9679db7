"""Where each attempt's ranks start: the placement factory a run's controller holds.

A run asks its factory for a fresh `Placement` per attempt (and one to check before the first): this machine for
``np < 0``, else a Spark barrier stage (classic or Connect). A warm session wraps a factory to serve its live ranks
instead; a test passes its own factory to stand in for a failing Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkrunner.launch import Launcher
from sparkrunner.placement import Placement
from sparkrunner.placement.connect import ConnectPlacement
from sparkrunner.placement.local import LocalPlacement
from sparkrunner.placement.spark import SparkPlacement
from sparkrunner.placement.spark_sessions import is_connect_session

PlacementFactory = Callable[[Launcher, Any, int], Placement]
"""Where the ranks of one attempt run, for (launcher, spark session or None, barrier tasks)."""


@dataclass(frozen=True)
class ColdPlacements:
    """A `Runner`'s placement factory: new ranks per attempt, on this machine (np < 0) or in Spark."""

    np: int
    """The run's np: below zero, |np| processes on this machine (whatever the size asked)."""
    start_timeout: float
    use_gpu: bool | None

    def __call__(self, launcher: Launcher, spark: Any, tasks: int) -> Placement:
        if self.np < 0:
            return LocalPlacement(-self.np, launcher, self.use_gpu)
        if is_connect_session(spark):
            return ConnectPlacement(spark, tasks, launcher, self.use_gpu)
        return SparkPlacement(spark, tasks, launcher, self.start_timeout, self.use_gpu)
