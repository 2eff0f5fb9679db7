"""The driver's supervision of one attempt: each `step()` says what happened, as a typed outcome.

`Supervisor.step` looks once at what the ranks reported and what the placement knows, and returns `StillRunning`,
`RanksSucceeded`, `RanksFailed` (with its cause), `Cancelled` (its Spark job), `TimedOut` or `Stalled`. The run's controller
steps it, acting on its own events between steps, until it says how the attempt ended (`Ended`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sparkrunner.driver import failure_causes
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.attempt.stacks import StallWatch, hang_error
from sparkrunner.errors import (
    ExecutorDecommissionedError,
    RankFailedError,
    RunCancelledError,
    RunTimeoutError,
    SparkRunnerError,
    StallError,
    StartTimeoutError,
)
from sparkrunner.placement import Placement
from sparkrunner.timeouts import FINISH_GRACE_S


@dataclass(frozen=True)
class RunDeadline:
    """The run's `timeout`, counted from the run's start: every attempt together, and the checks before the first
    (a Horovod build probe can take seconds on a busy driver)."""

    timeout: float
    at: float
    """`time.monotonic()` past which the run has timed out."""

    @classmethod
    def starting_now(cls, timeout: float | None) -> RunDeadline | None:
        return None if timeout is None else cls(timeout, time.monotonic() + timeout)

    def passed(self) -> bool:
        return time.monotonic() > self.at

    def refuse_start_when_passed(self, attempt: int) -> None:
        """Raise `RunTimeoutError` when the run's time ran out before attempt `attempt` started any rank."""
        if self.passed():
            raise RunTimeoutError(
                f"the run did not finish within timeout={self.timeout} s: it ran out before its ranks started "
                f"(attempt {attempt}), in the checks and waits before them; no rank was started"
            )


@dataclass(frozen=True)
class StillRunning:
    """Nothing decided yet."""


@dataclass(frozen=True)
class RanksSucceeded:
    """Every rank reported its outcome and none failed."""


@dataclass(frozen=True)
class RanksFailed:
    """A rank raised or vanished, its executor is being decommissioned, or the ranks ended unreported."""

    cause: SparkRunnerError


@dataclass(frozen=True)
class Cancelled:
    """The run's Spark job was cancelled from outside (its job group, the UI's kill link): stop as on Ctrl-C."""

    error: RunCancelledError


@dataclass(frozen=True)
class TimedOut:
    """Not every rank started within `start_timeout`, or the run exceeded `timeout`."""

    error: StartTimeoutError | RunTimeoutError


@dataclass(frozen=True)
class Stalled:
    """No rank printed or reported progress for `stall_timeout` s, with ``on_stall="fail"``."""

    error: StallError


Ended = RanksSucceeded | RanksFailed | Cancelled | TimedOut | Stalled
"""How an attempt ended, as the supervisor saw it."""
Outcome = StillRunning | Ended


def error_of(ended: Ended) -> SparkRunnerError | None:
    """The error the run reports for `ended` (None for `RanksSucceeded`); a rank's error carries its original as the
    cause (the remote traceback)."""
    match ended:
        case RanksSucceeded():
            return None
        case RanksFailed(cause=RankFailedError() as error):
            error.__cause__ = error.original
            return error
        case RanksFailed(cause=error) | Cancelled(error=error) | TimedOut(error=error) | Stalled(error=error):
            return error


class Supervisor:
    """Watches one attempt's channel and placement; `step()` is called with ``channel.changed`` held."""

    def __init__(
        self,
        channel: AttemptChannel,
        placement: Placement,
        start_timeout: float,
        deadline: RunDeadline | None,
        stall: StallWatch,
    ) -> None:
        self._channel = channel
        self._placement = placement
        self._start_timeout = start_timeout
        self._deadline = deadline
        self._stall = stall
        self._started = time.monotonic()

    def step(self) -> Outcome:
        """What happened since the last step (the first decisive answer wins)."""
        channel, report = self._channel, self._channel.report
        cancelled = self._cancelled()
        if cancelled is not None:
            return cancelled
        if report.errors or report.vanished:
            failure = failure_causes.run_failure(channel, self._placement)
            return self._cancelled() or RanksFailed(failure)  # ranks of a cancelled job may go first
        if report.all_done():
            return RanksSucceeded()
        ended = self._ended()
        if ended is not None:
            return ended
        elapsed = time.monotonic() - self._started
        if not report.all_connected() and elapsed > self._start_timeout:
            message = _start_timeout_message(channel, self._start_timeout)
            return TimedOut(hang_error(StartTimeoutError, message, channel.collect_stacks()))
        if self._deadline is not None and self._deadline.passed():
            message = (
                f"the run did not finish within timeout={self._deadline.timeout} s; every rank was stopped"
            )
            return TimedOut(hang_error(RunTimeoutError, message, channel.collect_stacks()))
        if report.all_connected():
            stalled = self._stall.check(channel.last_activity, channel.collect_stacks)
            if stalled is not None:
                return Stalled(stalled)
        return StillRunning()

    def _cancelled(self) -> Cancelled | None:
        how = self._placement.cancelled()
        if how is None:
            return None
        return Cancelled(
            RunCancelledError(
                f"the run was cancelled in Spark ({how}); it stopped as on Ctrl-C: every rank was asked to "
                f"stop, and the executors were kept"
            )
        )

    def _ended(self) -> RanksFailed | None:
        """The placement is going away (decommission) or ended while ranks had not all reported."""
        channel, report, placement = self._channel, self._channel.report, self._placement
        decommissioning = placement.decommissioning(channel.spark_task_ids())
        if decommissioning is not None:
            return RanksFailed(
                ExecutorDecommissionedError(
                    f"{decommissioning}: every rank was asked to stop, and ranks that watch stopping() or "
                    f"on_stop() had stop_grace_s to save a checkpoint"
                )
            )
        if (placement.finished() or placement.failure() is not None) and not channel.wait_until(
            lambda: report.all_done() or bool(report.errors or report.vanished), FINISH_GRACE_S
        ):
            missing = report.num_ranks - sum(1 for s in report.ranks.values() if s.done)
            return RanksFailed(failure_causes.ended_without_result(channel, placement, missing))
        return None


class Supervises(Protocol):
    """What the run's controller steps while an attempt runs (`Supervisor`, or a test's stand-in)."""

    def step(self) -> Outcome: ...


SupervisorFactory = Callable[[AttemptChannel, Placement, "RunDeadline | None"], Supervises]
"""The supervisor of one attempt, for its channel, its placement and the run's deadline."""


def _start_timeout_message(channel: AttemptChannel, start_timeout: float) -> str:
    report = channel.report
    connected = sorted(r for r, s in report.ranks.items() if s.connected_at is not None)
    return (
        f"only {len(connected)} of {report.num_ranks} ranks started within start_timeout={start_timeout} s "
        f"(connected: {connected or 'none'}). The cluster may be busy with other jobs, or executors are "
        f"missing; every rank that did start was stopped."
    )
