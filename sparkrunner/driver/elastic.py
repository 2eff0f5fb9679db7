"""Elastic world size on the driver: ``Runner(np=(min, max))`` sizes each attempt by the slots there are.

The first attempt waits up to ``ELASTIC_WAIT_S`` for `max` slots, then starts with what there is (at least
`min`, waiting up to `start_timeout` for those). After a failure the next attempt takes the slots there are
now instead of waiting for the old size. While an attempt runs below `max`, a watcher looks for slots to
grow into; when they come it asks the ranks to stop with reason ``"rescale"`` (`stopping()` turns true),
they save and return, and the attempt ends as `Rescaled`: the next one starts at the larger size, and a
rescale does not count as a failure. A local run (np < 0) has no slots to lose: it always uses `max`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sparkrunner.options import SizeRange
from sparkrunner.placement.slots import session_slots, wait_for_slots
from sparkrunner.timeouts import ELASTIC_POLL_S, ELASTIC_WAIT_S, SLOTS_POLL_S

log = logging.getLogger(__name__)

T = TypeVar("T")


class Rescaled(Exception):
    """An attempt ended because the run changes its size (not a failure: the next attempt resumes)."""

    def __init__(self, old: int, new: int) -> None:
        super().__init__(f"rescaled from {old} to {new} ranks")
        self.old, self.new = old, new


class Sizing:
    """Each attempt's world size: fixed (`np`), or chosen from the slots there are (`np=(min, max)`)."""

    def __init__(self, np: int, size: SizeRange | None, spark: Any, per_task: int, start_timeout: float):
        self.range = size
        self.least = abs(np) if size is None else size.least
        self._np, self._spark, self._per_task = abs(np), spark, per_task
        self._start_timeout = start_timeout

    @property
    def elastic(self) -> bool:
        """True when attempts may change size (a Spark run with ``np=(min, max)``)."""
        return self.range is not None and not self.range.local

    def available(self) -> int:
        """Ranks the cluster's slots hold now, whole tasks only, capped at max."""
        slots = session_slots(self._spark)
        ranks = self._np if slots is None else slots * self._per_task
        return min(ranks - ranks % self._per_task, self._np)

    def size_for(self, attempt: int) -> int:
        """The size of attempt `attempt`: waits (first attempt) up to ELASTIC_WAIT_S for max, then for min."""
        if not self.elastic:
            return self._np
        deadline = time.monotonic() + (ELASTIC_WAIT_S if attempt == 0 else 0)
        while self.available() < self._np and time.monotonic() < deadline:
            time.sleep(SLOTS_POLL_S)
        if self.available() < self.least:
            wait_for_slots(self._spark.sparkContext, self.least // self._per_task, self._start_timeout)
        size = max(self.available(), self.least)
        log.info("attempt %d runs %d ranks (np=(%d, %d))", attempt, size, self.least, self._np)
        return size

    def run(self, size: int, attempt: Callable[[], T], session: Callable[[], Any]) -> T:
        """``attempt()`` of `size` ranks, watched for slots to grow into; raises `Rescaled` when the ranks were asked
        to stop for a larger size (`session()`: the attempt's driver session, once it exists)."""
        if not self.elastic or size >= self._np:
            return attempt()
        watch = GrowWatch(size, self.available, session)
        try:
            value = attempt()
        except Exception as exc:
            if watch.stop() is not None:
                raise Rescaled(size, watch.target or size) from exc
            raise
        if watch.stop() is not None:
            raise Rescaled(size, watch.target or size)
        return value


class GrowWatch:
    """In the background, during an attempt of `size` ranks: once `available()` exceeds it, ask the ranks
    of `session()` to stop for a rescale (once)."""

    def __init__(self, size: int, available: Callable[[], int], session: Callable[[], Any]) -> None:
        self.target: int | None = None
        self._size, self._available, self._session = size, available, session
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sparkrunner-elastic", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(ELASTIC_POLL_S):
            try:
                now = self._available()
            except Exception:  # the cluster is going away: the attempt will say why
                return
            session = self._session()
            if now > self._size and session is not None and len(session.report.ranks) >= self._size:
                self.target = now
                log.info("slots for %d ranks are back: the run grows at its next checkpoint", now)
                session.ask_ranks_to_rescale()
                return

    def stop(self) -> int | None:
        """End the watch; the size it asked for, or None when it asked nothing."""
        self._done.set()
        self._thread.join()
        return self.target
