"""Straggler detection: which rank holds the others back, and whether data or compute explains it.

In synchronous training every rank's step lasts equally long (the fast ones wait in the collective), so
what tells a slow rank apart is its *own* time: its step less its wait in collectives. Each rank sends one
`AnatomyEvent` per window of at most `WINDOW_STEPS` steps or `ANATOMY_WINDOW_S` seconds; once every rank
has sent window k, a rank whose median own time in it is at least `THRESHOLD` (20%) above the median of
the ranks' is slow in that window. Slow in `SUSTAINED` (2) windows in a row, so over at most 50 steps or
10 s, it is named once per run. The part explaining the gap is the one (data wait or compute) by which the
rank's median exceeds the ranks' median the most. Runs of fewer than `MIN_RANKS` ranks have no median to
speak of and are not judged.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from sparkrunner.observe.events import AnatomyEvent

THRESHOLD = 0.2
SUSTAINED = 2
MIN_RANKS = 3
_PENDING_WINDOWS = 8  # windows some rank never completes (it stopped counting steps) are dropped
_CAUSES = {"data": "waiting for data", "compute": "computing"}


@dataclass(frozen=True)
class Straggler:
    """A rank found slow: where it runs, how much slower than the ranks' median, and what explains it."""

    rank: int
    host: str
    task: int | None
    slower: float
    """own time / the ranks' median own time - 1 (0.34: 34% slower)."""
    cause: str
    """"data" or "compute"."""
    executor: str | None = None
    """The Spark executor that ran its barrier task, when known."""

    def message(self) -> str:
        where = "the driver" if self.task is None else f"barrier task {self.task}"
        where = where if self.executor is None else f"executor {self.executor}, {where}"
        return (
            f"rank {self.rank} on {self.host} ({where}): {self.slower:.0%} slower than the median of the "
            f"ranks (its step less its wait in collectives, over the last {SUSTAINED} windows); most of the "
            f"extra time is {_CAUSES[self.cause]}"
        )


class StragglerDetector:
    """Collects every rank's windows and names each rank that stays slow, once."""

    def __init__(self, num_ranks: int) -> None:
        self._num_ranks = num_ranks
        self._windows: dict[int, dict[int, AnatomyEvent]] = {}
        self._streak: dict[int, int] = {}
        self._named: set[int] = set()

    def add(self, rank: int, summary: AnatomyEvent) -> list[Straggler]:
        """Take one rank's window; the ranks newly found slow once every rank has sent that window."""
        if summary.final or self._num_ranks < MIN_RANKS:
            return []
        window = self._windows.setdefault(summary.window, {})
        window[rank] = summary
        if len(window) < self._num_ranks:
            for old in sorted(self._windows)[:-_PENDING_WINDOWS]:
                del self._windows[old]
            return []
        del self._windows[summary.window]
        return self._judge(window)

    def _judge(self, window: dict[int, AnatomyEvent]) -> list[Straggler]:
        typical = {part: _median(window, part) for part in ("own", "data", "compute")}
        found = []
        for rank, summary in sorted(window.items()):
            slow = typical["own"] > 0 and summary.median["own"] >= (1 + THRESHOLD) * typical["own"]
            self._streak[rank] = self._streak.get(rank, 0) + 1 if slow else 0
            if self._streak[rank] >= SUSTAINED and rank not in self._named:
                self._named.add(rank)
                cause = max(("data", "compute"), key=lambda p: summary.median[p] - typical[p])
                slower = summary.median["own"] / typical["own"] - 1
                found.append(Straggler(rank, summary.host, summary.task, slower, cause, summary.executor))
        return found


def _median(window: dict[int, AnatomyEvent], part: str) -> float:
    return statistics.median(summary.median[part] for summary in window.values())
