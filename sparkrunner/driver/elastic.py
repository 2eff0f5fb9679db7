"""Elastic world size on the driver: ``Runner(np=(min, max))`` sizes each attempt by the slots there are.

The first attempt waits up to ``ELASTIC_WAIT_S`` for `max` slots, then starts with what there is (at least
`min`, waiting up to `start_timeout` for those). After a failure the next attempt takes the slots there are
now instead of waiting for the old size. While an attempt runs below `max`, a `GrowWatch` looks for slots to
grow into and proposes the larger size to the run's controller; the controller asks `Sizing.grow` for a
`Resize` and, given one, asks the ranks to stop with reason ``"rescale"`` (`stopping()` turns true); they save
and return, and the next attempt runs the resize's np. A resize does not count as a failure. A local run
(np < 0) has no slots to lose: it always uses `max`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.options import SizeRange
from sparkrunner.placement.slots import session_slots, wait_for_slots
from sparkrunner.timeouts import ELASTIC_POLL_S, ELASTIC_WAIT_S, SLOTS_POLL_S

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resize:
    """The scaling policy's decision: the attempt of `old` ranks ends for one of `new` (not a failure), and the
    next attempt runs `new` ranks."""

    old: int
    new: int

    def __str__(self) -> str:
        return f"rescaled from {self.old} to {self.new} ranks"


class Sizing:
    """The scaling policy: each attempt's np, fixed (`np`) or chosen from the slots there are (`np=(min, max)`),
    and whether a running attempt grows to the np its watch proposes."""

    def __init__(
        self, np: int, np_range: SizeRange | None, spark: Any, ranks_per_task: int, start_timeout: float
    ) -> None:
        self.np_range = np_range
        self.np = abs(np)
        """The most ranks an attempt runs (np, or max of an np range)."""
        self.least = abs(np) if np_range is None else np_range.least
        self._spark, self._per_task = spark, ranks_per_task
        self._start_timeout = start_timeout

    @property
    def elastic(self) -> bool:
        """True when attempts may change size (a Spark run with ``np=(min, max)``)."""
        return self.np_range is not None and not self.np_range.local

    def available(self) -> int:
        """Ranks the cluster's slots hold now, whole tasks only, capped at max."""
        slots = session_slots(self._spark)
        ranks = self.np if slots is None else slots * self._per_task
        return min(ranks - ranks % self._per_task, self.np)

    def np_for(self, attempt: int) -> int:
        """The np of attempt `attempt`: waits (first attempt) up to ELASTIC_WAIT_S for max, then for min."""
        if not self.elastic:
            return self.np
        deadline = time.monotonic() + (ELASTIC_WAIT_S if attempt == 0 else 0)
        while self.available() < self.np and time.monotonic() < deadline:
            time.sleep(SLOTS_POLL_S)
        if self.available() < self.least:
            wait_for_slots(self._spark.sparkContext, self.least // self._per_task, self._start_timeout)
        np = max(self.available(), self.least)
        self.announce(attempt, np)
        return np

    def announce(self, attempt: int, np: int) -> None:
        """Say the size of an elastic run's attempt (chosen here, or by a resize)."""
        log.info("attempt %d runs %d ranks (np=(%d, %d))", attempt, np, self.least, self.np)

    def watch(self, np: int, channel: AttemptChannel, propose: Callable[[int], None]) -> GrowWatch | None:
        """A watch that proposes a larger np to `propose` while an attempt of `np` ranks runs; None when the
        attempt cannot grow."""
        if not self.elastic or np >= self.np:
            return None
        return GrowWatch(np, self.available, channel, propose)

    def grow(self, np: int, proposed: int) -> Resize | None:
        """Whether an attempt of `np` ranks stops to grow to `proposed` (capped at max): a `Resize`, or None."""
        new = min(proposed, self.np)
        return Resize(np, new) if self.elastic and new > np else None


class GrowWatch:
    """In the background, during an attempt of `np` ranks: once `available()` exceeds it and every rank is
    connected to `channel`, propose that np (once); the run's controller decides."""

    def __init__(
        self, np: int, available: Callable[[], int], channel: AttemptChannel, propose: Callable[[int], None]
    ) -> None:
        self._np, self._available, self._channel, self._propose = np, available, channel, propose
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sparkrunner-elastic", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(ELASTIC_POLL_S):
            try:
                now = self._available()
            except Exception:  # the cluster is going away: the attempt will say why
                return
            if now > self._np and len(self._channel.report.ranks) >= self._np:
                self._propose(now)
                return

    def stop(self) -> None:
        """End the watch."""
        self._done.set()
        self._thread.join()
