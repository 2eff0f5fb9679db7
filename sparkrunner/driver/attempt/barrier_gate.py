"""Driver side of `BarrierTaskContext.get().barrier()` / `allGather()` called in the ranks (the rank side is
`sparkrunner.ranks.barrier_context`): each call is a `BarrierJoin` on the rank's own connection, answered for
every rank at once (`BarrierRelease`) when the last rank of the run has made the same call.
"""

from __future__ import annotations

import threading

from sparkrunner.channel import Connection
from sparkrunner.channel.messages import BarrierJoin, BarrierRelease, send_to_all


class BarrierGate:
    """Holds each barrier round's callers until all `ranks` ranks of the run have joined it."""

    def __init__(self, ranks: int) -> None:
        self._ranks = ranks
        self._lock = threading.Lock()
        self._rounds: dict[int, dict[tuple[int, int], tuple[Connection, str]]] = {}

    def join(self, conn: Connection, rank: int, join: BarrierJoin) -> None:
        """Record one rank's call; the last rank to make it releases every rank with every message, in
        partition order (then rank order: a task may hold several ranks)."""
        with self._lock:
            waiting = self._rounds.setdefault(join.round, {})
            waiting[(join.partition, rank)] = (conn, join.message)
            if len(waiting) < self._ranks:
                return
            del self._rounds[join.round]
        joined = [waiting[key] for key in sorted(waiting)]
        # a rank that is gone is skipped: the run fails through its supervisor, and ends the others
        send_to_all([c for c, _ in joined], BarrierRelease(join.round, [message for _, message in joined]))
