"""Where is every rank? The driver asks every live rank for its threads' stacks over the channel.

`StackCollector` asks every live rank at once and waits a bounded time; a rank that does not answer (stopped,
or holding the GIL) is named as such. `StackReport` is what errors, the stall watchdog and
`Runner.dump_stacks` show.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sparkrunner.channel.messages import Stacks
from sparkrunner.errors import HangError, StallError
from sparkrunner.stack_report import RankStack, StackReport
from sparkrunner.system.processes import proc_stat
from sparkrunner.timeouts import STACK_ANSWER_TIMEOUT_S

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveRank:
    """What the driver knows about a connected rank it can ask."""

    rank: int
    host: str
    pid: int


class StackCollector:
    """Driver side: asks every live rank for its stacks (`DumpStacks`) and gathers the answers."""

    def __init__(self, broadcast: Callable[[int], None]) -> None:
        self._broadcast = broadcast
        self._cond = threading.Condition()
        self._request = 0
        self._replies: dict[int, Stacks] = {}
        self._asking = threading.Lock()

    def on_reply(self, rank: int, reply: Stacks) -> None:
        with self._cond:
            if reply.request == self._request:
                self._replies[rank] = reply
                self._cond.notify_all()

    def collect(
        self,
        live: list[LiveRank],
        missing: list[int],
        tail: Callable[[int], list[str]],
        timeout: float = STACK_ANSWER_TIMEOUT_S,
    ) -> StackReport:
        """Ask `live` ranks for their stacks; `missing` ranks (never connected) are listed as such."""
        with self._asking:
            with self._cond:
                self._request += 1
                self._replies = {}
                request = self._request
            self._broadcast(request)
            wanted = {r.rank for r in live if not _stopped_here(r)}  # a stopped process cannot answer
            with self._cond:
                self._cond.wait_for(lambda: wanted <= self._replies.keys(), timeout)
                replies = dict(self._replies)
        ranks = {r.rank: _rank_stack(r, replies.get(r.rank), tail(r.rank), timeout) for r in live}
        for rank in missing:
            ranks[rank] = RankStack(rank, "", None, "never connected to the driver", None, tail(rank))
        return StackReport(ranks)


def _rank_stack(rank: LiveRank, reply: Stacks | None, tail: list[str], timeout: float) -> RankStack:
    if reply is None:
        if _stopped_here(rank):
            why = "did not answer: its process is stopped (SIGSTOP?)"
        else:
            why = f"did not answer within {timeout:g} s ({_silence_reason(rank)})"
        return RankStack(rank.rank, rank.host, rank.pid, why, None, tail)
    return RankStack(rank.rank, rank.host, rank.pid, reply.where, reply.threads, tail)


def _stopped_here(rank: LiveRank) -> bool:
    """Whether `rank` runs on the driver's own machine and /proc shows it stopped: it is not waited for."""
    if rank.host != socket.gethostname():
        return False
    stat = proc_stat(rank.pid)
    return stat is not None and stat.state in ("T", "t")


def _silence_reason(rank: LiveRank) -> str:
    """Why a rank that is not stopped here may not answer."""
    if rank.host == socket.gethostname() and proc_stat(rank.pid) is None:
        return "its process is gone"
    return "stopped?, or busy in C code that holds the GIL"


E = TypeVar("E", bound=HangError)


def hang_error(cls: type[E], message: str, report: StackReport) -> E:
    """`cls(message)` naming where each rank is; the full stacks as `stack_report` and an artifact."""
    error = cls(
        f"{message}\n\nWhere each rank was:\n{report.summary()}\n(every thread's stack and each rank's last "
        f"output: error.stack_report; with MLflow tracking on, also the run's artifact sparkrunner/stacks.txt)"
    )
    error.stack_report = report
    error.artifacts["stacks.txt"] = str(report)
    return error


class StallWatch:
    """The stall watchdog: no output and no progress report for `stall_timeout` s shows every rank's stacks
    (``on_stall="warn"``, then keeps watching) or fails the run with `StallError` (``on_stall="fail"``)."""

    def __init__(self, stall_timeout: float | None, on_stall: str) -> None:
        self._timeout = stall_timeout
        self._fail = on_stall == "fail"
        self._warned_at = 0.0

    def check(self, last_activity: float, collect: Callable[[], StackReport]) -> StallError | None:
        """The `StallError` that ends the run (``on_stall="fail"``), else None (after a warning, if stalled)."""
        if self._timeout is None:
            return None
        quiet_since = max(last_activity, self._warned_at)
        if time.monotonic() - quiet_since < self._timeout:
            return None
        report = collect()
        message = f"no rank printed or reported progress for {self._timeout:g} s (stall_timeout)"
        if self._fail:
            return hang_error(StallError, message + "; every rank was stopped", report)
        self._warned_at = time.monotonic()
        log.warning("%s; still running. Where each rank is:\n%s\n\n%s", message, report.summary(), report)
        return None
