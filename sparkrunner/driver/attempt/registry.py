"""The driver's rank bookkeeping: what each rank of one attempt reported (connected, result, error, exit).

`AttemptChannel` feeds it from the channel and guards it with its condition variable (``channel.changed``);
the supervisor and failure attribution read it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sparkrunner.channel import messages as m
from sparkrunner.errors import RankFailedError


@dataclass
class RankState:
    connected_at: float | None = None
    host: str = ""
    done: bool = False
    gone: bool = False
    pid: int = 0
    task: int | None = None
    """The barrier task that started this rank (None on the driver, np < 0)."""
    failed_at: float | None = None
    wants_grace: bool = False
    """`main` handles stops: a stop gives it `stop_grace_s` (`GraceWanted`)."""


@dataclass
class RankRegistry:
    """Everything the ranks reported; its callers hold the channel's condition variable."""

    num_ranks: int
    ranks: dict[int, RankState] = field(default_factory=dict)
    results: dict[int, bytes] = field(default_factory=dict)
    """Pickled return values: rank 0's, or every rank's when all were asked for (`Runner.run_all`)."""
    errors: list[RankFailedError] = field(default_factory=list)
    vanished: list[int] = field(default_factory=list)
    output_ended: set[int] = field(default_factory=set)
    """Ranks whose output relay has sent everything and hung up."""
    task_reports: dict[int, m.TaskReport] = field(default_factory=dict)
    """Barrier task index -> the `TaskReport` of a task that failed or whose ranks failed."""
    files: dict[str, str] = field(default_factory=dict)
    """Files ranks sent with `send_file_to_driver`: "rank N/name" -> where the driver saved it."""

    def all_connected(self) -> bool:
        return sum(1 for s in self.ranks.values() if s.connected_at is not None) == self.num_ranks

    def all_gone(self) -> bool:
        """True when every rank that connected has disconnected again."""
        return all(s.gone for s in self.ranks.values())

    def any_wants_grace(self) -> bool:
        return any(s.wants_grace for s in self.ranks.values())

    def savers_gone(self) -> bool:
        """True when no rank that asked for a grace period is still connected: what is left only waits."""
        return not any(s.wants_grace and not s.gone for s in self.ranks.values())

    def all_done(self) -> bool:
        return sum(1 for s in self.ranks.values() if s.done) == self.num_ranks

    def over(self) -> bool:
        """True once every rank reported how its function ended and hung up: nothing of theirs is left to wait
        for."""
        return self.all_done() and self.all_gone()

    def connected(self, hello: m.Hello) -> None:
        """A rank said hello on its own connection."""
        self.ranks[hello.rank] = RankState(time.monotonic(), hello.host, pid=hello.pid, task=hello.task)

    def reported(self, rank: int, outcome: m.Result | RankFailedError) -> None:
        """A rank reported how its function ended: its (pickled) value, or the error it raised."""
        if isinstance(outcome, RankFailedError):
            self.errors.append(outcome)
            self.ranks[rank].failed_at = time.monotonic()
        elif outcome.value is not None:
            self.results[rank] = outcome.value
        self.ranks[rank].done = True

    def disconnected(self, rank: int) -> None:
        """A rank's connection ended; before it reported, the rank has vanished."""
        state = self.ranks[rank]
        state.gone = True
        if not state.done:
            self.vanished.append(rank)
            state.failed_at = time.monotonic()
