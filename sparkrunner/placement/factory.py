"""Where each attempt's ranks start: the placement factory a run's controller holds.

A run asks its factory for a fresh `Placement` per attempt (this machine for ``np < 0``, else a Spark barrier
stage, classic or Connect), and to check, before the first attempt and after a failure, that one could run
(building none). A warm session wraps a factory to serve its live ranks instead; a test passes its own factory to
stand in for a failing Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from sparkrunner.launch import Launcher
from sparkrunner.placement import Placement
from sparkrunner.placement.connect import ConnectPlacement, check_connect
from sparkrunner.placement.local import LocalPlacement, check_local
from sparkrunner.placement.spark import SparkPlacement, check_spark
from sparkrunner.placement.spark_sessions import is_connect_session


class PlacementFactory(Protocol):
    """Where the ranks of one attempt run, for (launcher, spark session or None, barrier tasks)."""

    def __call__(self, launcher: Launcher, spark: Any, tasks: int) -> Placement:
        """A new placement (each attempt gets its own)."""

    def check(self, launcher: Launcher, spark: Any, tasks: int) -> None:
        """Raise a typed error before anything starts when such a placement cannot run; builds none."""


@dataclass(frozen=True)
class ColdPlacements:
    """A `Runner`'s placement factory: new ranks per attempt, on this machine (np < 0) or in Spark."""

    np: int
    """The run's np: below zero, |np| processes on this machine (whatever the size asked)."""
    start_timeout: float
    use_gpu: bool | None

    def __call__(self, launcher: Launcher, spark: Any, tasks: int) -> Placement:
        if self.np < 0:
            return LocalPlacement(-self.np, launcher)
        if is_connect_session(spark):
            return ConnectPlacement(spark, tasks, launcher)
        return SparkPlacement(spark, tasks, launcher)

    def check(self, launcher: Launcher, spark: Any, tasks: int) -> None:
        if self.np < 0:
            check_local(launcher, self.use_gpu)
        elif is_connect_session(spark):
            check_connect(spark, tasks, launcher, self.use_gpu)
        else:
            check_spark(spark, tasks, launcher, self.start_timeout, self.use_gpu)
