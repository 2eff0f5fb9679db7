"""The attempt loop on the driver: run, and when an attempt fails and attempts remain, run again.

Each attempt is a fresh placement (for Spark: a new barrier stage), whose ranks resume from the latest
checkpoint. Errors that retrying cannot fix (bad arguments, `DoNotRetry`, a predicate's no) end the run at
once; when attempts run out the final error carries every attempt's.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sparkrunner.channel.environment import Env
from sparkrunner.driver.elastic import Rescaled
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

T = TypeVar("T")
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


def _never_retried(error: BaseException) -> bool:
    if isinstance(error, _NEVER_RETRIED):
        return True
    return isinstance(error, RankFailedError) and isinstance(error.original, _NEVER_RETRIED)


def run_attempts(
    policy: RetryPolicy,
    attempts: list[AttemptRecord],
    run_attempt: Callable[[int], T],
    resume_step: Callable[[], int | None],
    before_retry: Callable[[], None],
) -> T:
    """Call ``run_attempt(n)`` for n = 0, 1, ... until one succeeds or the policy says stop.

    `attempts` receives one record per attempt as it starts; `before_retry` waits for the cluster to be
    ready again. Prints one line per failed attempt and per retry, for the person watching the driver.
    """
    failures = 0
    for number in itertools.count():
        if number and not attempts[-1].rescaled:
            before_retry()
        record = AttemptRecord(number, time.time(), resumed_from_step=resume_step() if number else None)
        attempts.append(record)
        if number:
            log.info(f"attempt {number} started{_resume_text(record.resumed_from_step)}")
        try:
            value = run_attempt(number)
        except Rescaled as exc:
            record.ended_at, record.rescaled = time.time(), True
            log.info(f"attempt {number} ended after {record.duration_s:.1f} s: {exc}")
            continue
        except BaseException as exc:
            record.ended_at, record.error = time.time(), exc
            if policy.max_failures == 0:
                raise
            retry = failures < policy.max_failures and policy.retryable(exc)
            why = _next(retry, failures == policy.max_failures, exc)
            failures += 1
            log.warning(f"attempt {number} failed after {record.duration_s:.1f} s: {_first_line(exc)}{why}")
            if not retry:
                raise _final_error(attempts, policy, exc) from exc
            continue
        record.ended_at = time.time()
        if number:
            log.info(f"attempt {number} succeeded")
        return value
    raise AssertionError("unreachable: attempts go on until one returns or raises")


def _final_error(attempts: list[AttemptRecord], policy: RetryPolicy, last: BaseException) -> BaseException:
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


def _next(retry: bool, was_last: bool, error: BaseException) -> str:
    if retry:
        return "; starting the next attempt from the latest checkpoint"
    if not isinstance(error, Exception):
        return ""
    return "; no attempts left" if was_last else "; this error is not retried"


def _resume_text(step: int | None) -> str:
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
