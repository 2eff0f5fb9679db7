"""Elastic world size on the driver: ``Runner(np=(min, max))`` sizes each attempt by the slots there are.

`Sizing`, the scaling policy, only decides: the run's controller reads the cluster's slots and asks it. The first
attempt waits up to ``ELASTIC_WAIT_S`` for `max` slots (`patience_s`), then starts with what there is (at least
`min`: the controller waits up to `start_timeout` for those). After a failure the next attempt takes the slots
there are now instead of waiting for the old size. While an attempt runs below `max`, the controller asks
`Sizing.grow` between supervisor steps (at most every ``ELASTIC_POLL_S``); given a `Resize` it asks the ranks to
stop with reason ``"rescale"`` (`stopping()` turns true); they save and return, and the next attempt runs the
resize's np. A resize does not count as a failure. A local run (np < 0) has no slots to lose: it always uses
`max`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sparkrunner.options import SizeRange
from sparkrunner.timeouts import ELASTIC_WAIT_S

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
    and whether a running attempt grows into the slots there are now. It reads nothing and waits for nothing:
    `slots` is what the controller saw (None: the cluster does not say)."""

    def __init__(self, np: int, np_range: SizeRange | None, ranks_per_task: int) -> None:
        self.np_range = np_range
        self.np = abs(np)
        """The most ranks an attempt runs (np, or max of an np range)."""
        self.least = abs(np) if np_range is None else np_range.least
        self.per_task = ranks_per_task

    @property
    def elastic(self) -> bool:
        """True when attempts may change size (a Spark run with ``np=(min, max)``)."""
        return self.np_range is not None and not self.np_range.local

    def ranks_in(self, slots: int | None) -> int:
        """Ranks `slots` task slots hold, whole tasks only, capped at max."""
        ranks = self.np if slots is None else slots * self.per_task
        return min(ranks - ranks % self.per_task, self.np)

    def patience_s(self, attempt: int) -> float:
        """How long the controller waits for max slots before attempt `attempt` (the first only) starts smaller."""
        return ELASTIC_WAIT_S if self.elastic and attempt == 0 else 0.0

    def np_for(self, attempt: int, slots: int | None) -> int:
        """The np of attempt `attempt`, once the controller waited as `patience_s` says and for min slots."""
        if not self.elastic:
            return self.np
        np = max(self.ranks_in(slots), self.least)
        self.announce(attempt, np)
        return np

    def announce(self, attempt: int, np: int) -> None:
        """Say the size of an elastic run's attempt (chosen here, or by a resize)."""
        log.info("attempt %d runs %d ranks (np=(%d, %d))", attempt, np, self.least, self.np)

    def can_grow(self, np: int) -> bool:
        """Whether an attempt of `np` ranks may grow: the controller asks `grow` only then."""
        return self.elastic and np < self.np

    def grow(self, np: int, slots: int | None, connected: int) -> Resize | None:
        """Whether an attempt of `np` ranks, `connected` of them connected, stops to grow into `slots`: a
        `Resize` once every rank is connected and the slots hold more ranks, else None."""
        now = self.ranks_in(slots)
        return Resize(np, now) if self.can_grow(np) and connected >= np and now > np else None
