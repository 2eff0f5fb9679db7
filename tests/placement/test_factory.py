"""The placement factory a run's controller holds: this machine for np < 0, a Spark barrier stage otherwise, a new
placement per call (each attempt gets its own), and a check that builds none."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrunner.errors import NotEnoughSlotsError
from sparkrunner.launch.direct import DirectLauncher
from sparkrunner.placement.factory import ColdPlacements
from sparkrunner.placement.local import LocalPlacement
from sparkrunner.placement.spark import SparkPlacement


def test_np_below_zero_places_on_this_machine_with_no_spark() -> None:
    placements = ColdPlacements(-2, 1.0, None)
    first, second = placements(DirectLauncher(), None, 2), placements(DirectLauncher(), None, 2)
    assert isinstance(first, LocalPlacement) and first is not second
    assert first.job_group is None


def test_np_above_zero_places_a_barrier_stage_of_the_tasks_asked(spark_local: Any) -> None:
    slots = spark_local.sparkContext.defaultParallelism
    placements = ColdPlacements(slots, 1.0, None)
    fits = placements(DirectLauncher(), spark_local, slots)
    assert isinstance(fits, SparkPlacement)
    placements.check(DirectLauncher(), spark_local, slots)  # the cluster has the slots
    with pytest.raises(NotEnoughSlotsError):
        placements.check(DirectLauncher(), spark_local, slots + 1)
