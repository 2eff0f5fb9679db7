"""What the attempts of a run may do: the failure policy the run's controller asks for a typed decision.

`RetryPolicy` decides, from an attempt's error, what the run does next: `Retry` (another attempt) or `Fail`
(why it ends). Errors that retrying cannot fix (bad arguments, `DoNotRetry`, a predicate's no) end the run at
once, an interrupt (Ctrl-C) ends it as an interrupt, and when attempts run out the final error carries every
attempt's. Each new attempt is a fresh placement (for Spark: a new barrier stage) whose ranks resume from the
latest checkpoint.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkrunner.common.environment import Env
from sparkrunner.errors import (
    AttemptsFailedError,
    BarrierModeUnsupportedError,
    DoNotRetry,
    InvalidArgumentError,
    LauncherUnavailableError,
    NotEnoughSlotsError,
    NotPicklableError,
    RankFailedError,
    RunCancelledError,
    RunTimeoutError,
)
from sparkrunner.observe.observers import AttemptRecord
from sparkrunner.options import RunOptions

log = logging.getLogger(__name__)

RetryPredicate = Callable[[BaseException], bool]

_NEVER_RETRIED: tuple[type[BaseException], ...] = (
    InvalidArgumentError,
    NotPicklableError,
    LauncherUnavailableError,
    BarrierModeUnsupportedError,
    NotEnoughSlotsError,
    RunTimeoutError,
    DoNotRetry,
    RunCancelledError,
)


class Why(enum.Enum):
    """Why a run ends with its error."""

    NO_RETRIES = "no retries"
    """No retries were asked for (``max_failures=0``): the run raises the attempt's own error."""
    NO_ATTEMPTS_LEFT = "no attempts left"
    """Every failure the run allowed is spent."""
    NOT_RETRIED = "not retried"
    """Another attempt cannot fix this error (or the user's `retry_if` said no, or a stop was asked)."""
    INTERRUPTED = "interrupted"
    """Ctrl-C (a `KeyboardInterrupt`, or another `BaseException` that is no `Exception`): raised as it is."""


@dataclass(frozen=True)
class Retry:
    """The loop's next step after an attempt failed with `error`: another attempt, from the latest checkpoint."""

    error: BaseException


@dataclass(frozen=True)
class Fail:
    """The loop's next step after an attempt failed with `error`: the run ends, for `why`."""

    why: Why
    error: BaseException


@dataclass(frozen=True)
class Done:
    """The loop's next step: the run succeeded."""


@dataclass(frozen=True)
class RetryPolicy:
    """How many attempts may fail, and which errors are worth another attempt."""

    max_failures: int = 0
    retry_if: RetryPredicate | None = None

    def retryable(self, error: BaseException) -> bool:
        """False for errors another attempt cannot fix; else the user's predicate decides (default: retry)."""
        if not isinstance(error, Exception) or _never_retried(error):
            return False
        return True if self.retry_if is None else bool(self.retry_if(error))

    def decide(self, error: BaseException, failures: int, stop_asked: bool = False) -> Retry | Fail:
        """After an attempt failed with `error`, `failures` attempts having failed before it (`stop_asked`: the
        caller asked the run to stop while it ran, so another attempt is not wanted)."""
        if not isinstance(error, Exception):
            return Fail(Why.INTERRUPTED, error)
        if self.max_failures == 0:
            return Fail(Why.NO_RETRIES, error)
        if failures < self.max_failures and self.retryable(error) and not stop_asked:
            return Retry(error)
        if failures == self.max_failures:
            return Fail(Why.NO_ATTEMPTS_LEFT, error)
        return Fail(Why.NOT_RETRIED, error)


def _never_retried(error: BaseException) -> bool:
    if isinstance(error, _NEVER_RETRIED):
        return True
    return isinstance(error, RankFailedError) and isinstance(error.original, _NEVER_RETRIED)


def failure_line(record: AttemptRecord, decision: Retry | Fail) -> str:
    """The line the person watching the driver sees when an attempt failed (runs with retries only)."""
    why = _why(decision)
    return (
        f"attempt {record.number} failed after {record.duration_s:.1f} s: {_first_line(decision.error)}{why}"
    )


def final_error(attempts: list[AttemptRecord], policy: RetryPolicy, last: BaseException) -> BaseException:
    """What a run with retries raises when it gives up: one attempt's own error, else every attempt's."""
    if len(attempts) == 1:
        return last
    failed = [a for a in attempts if a.error is not None]
    why = (
        f"all {len(failed)} attempts failed (max_failures={policy.max_failures})"
        if policy.retryable(last)
        else f"attempt {len(attempts) - 1} failed with an error that is not retried"
    )
    lines = [f"  attempt {a.number}: {type(a.error).__name__}: {_first_line(a.error)}" for a in failed]
    errors = [a.error for a in failed if a.error is not None]
    return AttemptsFailedError(f"{why}:\n" + "\n".join(lines), errors)


def run_error(fail: Fail, attempts: list[AttemptRecord], policy: RetryPolicy) -> BaseException:
    """The error a run raises once the failure policy decided it fails (`fail`): an interrupt as it is (noting
    what the attempts before it did), the attempt's own without retries, else every attempt's."""
    error = fail.error
    if fail.why is Why.INTERRUPTED:
        if len(attempts) > 1:
            error.add_note(interrupted_note(attempts))
        return error
    if fail.why is Why.NO_RETRIES:
        return error
    log.warning(failure_line(attempts[-1], fail))
    final = final_error(attempts, policy, error)
    if final is not error:
        final.__cause__ = error
    return final


def _why(decision: Retry | Fail) -> str:
    if isinstance(decision, Retry):
        return "; starting the next attempt from the latest checkpoint"
    if decision.why is Why.INTERRUPTED:
        return ""
    return "; no attempts left" if decision.why is Why.NO_ATTEMPTS_LEFT else "; this error is not retried"


def interrupted_note(attempts: list[AttemptRecord]) -> str:
    """What an interrupt of a run with retries says it ended: the attempt it stopped, and how the ones before
    it ended."""
    *before, last = attempts
    lines = [f"the run was interrupted during attempt {last.number}"]
    lines += [f"  attempt {a.number}: {_ended(a)}" for a in before]
    return "\n".join(lines)


def _ended(record: AttemptRecord) -> str:
    if record.error is not None:
        return f"{type(record.error).__name__}: {_first_line(record.error)}"
    return "rescaled" if record.rescaled else "ended"


def resume_text(step: int | None) -> str:
    """How an attempt after the first starts: from the latest checkpoint's step, or over."""
    return " (no checkpoint yet: starting over)" if step is None else f" (latest checkpoint: step {step})"


def _first_line(error: Any) -> str:
    text = str(error).strip().splitlines()
    return text[0].rstrip(":; ") if text else type(error).__name__


@dataclass(frozen=True)
class RecoveryOptions:
    """Runner's recovery options (max_failures, retry_if, checkpoint_dir, stop_grace_s), as the attempts use them."""

    policy: RetryPolicy
    checkpoint_dir: str | None
    stop_grace_s: float

    @classmethod
    def of(cls, options: RunOptions) -> RecoveryOptions:
        """The recovery part of Runner's options (already checked by `RunOptions`)."""
        folder = None if options.checkpoint_dir is None else str(options.checkpoint_dir)
        return cls(RetryPolicy(options.max_failures, options.retry_if), folder, float(options.stop_grace_s))

    def rank_env(self, attempt: int) -> dict[str, str]:
        """What every rank of attempt `attempt` needs to know about recovery."""
        return {Env.ATTEMPT: str(attempt), Env.STOP_GRACE_S: repr(self.stop_grace_s)}
