"""The data path on the driver: `materialize` (Parquet once, cached by plan and inputs) and `stream` (a broker
that hands Spark's partitions to the ranks as they are computed). Nothing here runs in a rank."""

from __future__ import annotations

import sys
from typing import Any


def check_stream_feeders(arguments: tuple[Any, ...], barrier_tasks: int) -> None:
    """A run that reads a `stream()` needs task slots for its feeders. A `StreamData` exists only once its module
    is loaded, so a run without one never imports the data path (numpy and pyarrow: the `data` extra)."""
    if "sparkrunner.data.stream_handle" in sys.modules:
        from sparkrunner.data.driver.streaming import check_feeder_slots

        check_feeder_slots(arguments, barrier_tasks)
