"""What the benchmarks share: timing a call, with one uncounted warm-up, and contenders timed in turn."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def seconds(fn: Callable[[], Any]) -> float:
    """The wall time of one call of `fn`."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timed(fn: Callable[[], Any], repeats: int) -> list[float]:
    """One warm-up call (not counted: it pays for cold imports and JVM start-up), then `repeats` timed calls."""
    fn()
    return [seconds(fn) for _ in range(repeats)]


def interleaved(
    contenders: dict[str, Callable[[], Any]], repeats: int, settle_s: float = 0.0
) -> dict[str, list[float]]:
    """Each contender's seconds over `repeats` rounds of one call each, in turn (warm them up first): a load that
    comes and goes on a shared machine falls on every contender alike, so their ratios hold. `settle_s`: a pause
    before each call (untimed), so that what the call before left ending does not fall on the next one."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            time.sleep(settle_s)
            times[name].append(seconds(fn))
    return times
