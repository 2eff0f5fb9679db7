"""What the benchmarks share: timing a call with one uncounted warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], repeats: int) -> list[float]:
    """One warm-up call (not counted: it pays for cold imports and JVM start-up), then `repeats` timed calls."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times
