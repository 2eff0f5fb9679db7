"""RetryPolicy: which errors another attempt may fix, its typed decisions, and the lines and final error a run
with retries shows (no Spark, no ranks)."""

from __future__ import annotations

import pytest

from sparkrunner.driver.retry_policy import Fail, Retry, RetryPolicy, Why, failure_line, final_error
from sparkrunner.errors import (
    AttemptsFailedError,
    DoNotRetry,
    InvalidArgumentError,
    NotEnoughSlotsError,
    RankFailedError,
    RunCancelledError,
    RunTimeoutError,
)
from sparkrunner.observe.observers import AttemptRecord


def rank_error(exc_type: str, original: BaseException | None = None) -> RankFailedError:
    return RankFailedError(1, exc_type, "boom", "", original)


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (RuntimeError("flaky"), True),
        (rank_error("ValueError"), True),
        (rank_error("RankProcessDied"), True),
        (rank_error("DoNotRetry", DoNotRetry("stop")), False),
        (DoNotRetry("stop"), False),
        (InvalidArgumentError("np"), False),
        (NotEnoughSlotsError("np=8"), False),
        (RunTimeoutError("late"), False),
        (RunCancelledError("cancelJobGroup"), False),  # cancelled in Spark: someone wants it to stop
        (KeyboardInterrupt(), False),  # not an Exception: the person at the keyboard wants it to stop
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_which_errors_another_attempt_may_fix(error: BaseException, retried: bool) -> None:
    assert RetryPolicy(max_failures=3).retryable(error) is retried


def test_the_users_predicate_decides_among_retryable_errors() -> None:
    policy = RetryPolicy(max_failures=3, retry_if=lambda e: "flaky" in str(e))
    assert policy.retryable(RuntimeError("flaky")) and not policy.retryable(RuntimeError("bug"))
    assert not policy.retryable(DoNotRetry("flaky"))  # never retried, whatever the predicate says


@pytest.mark.parametrize(
    ("max_failures", "error", "failures", "decision"),
    [
        (0, RuntimeError("x"), 0, Why.NO_RETRIES),  # no retries: the error itself
        (2, RuntimeError("x"), 0, Retry),
        (2, RuntimeError("y"), 1, Retry),
        (1, RuntimeError("y"), 1, Why.NO_ATTEMPTS_LEFT),
        (3, DoNotRetry("y"), 1, Why.NOT_RETRIED),
        (3, KeyboardInterrupt(), 0, Why.INTERRUPTED),  # raised as it is, with or without retries
        (0, KeyboardInterrupt(), 0, Why.INTERRUPTED),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_the_policy_decides_from_the_error_and_the_failures_so_far(
    max_failures: int, error: BaseException, failures: int, decision: type[Retry] | Why
) -> None:
    expected = Retry(error) if decision is Retry else Fail(decision, error)  # type: ignore[arg-type]
    assert RetryPolicy(max_failures=max_failures).decide(error, failures) == expected


def failed(number: int, error: BaseException) -> AttemptRecord:
    return AttemptRecord(number, 100.0, ended_at=101.5, error=error)


def test_the_final_error_carries_every_attempts_error() -> None:
    errors = [RuntimeError("first"), RuntimeError("second")]
    attempts = [failed(n, e) for n, e in enumerate(errors)]
    error = final_error(attempts, RetryPolicy(max_failures=1), errors[-1])
    assert isinstance(error, AttemptsFailedError) and error.errors == errors
    assert str(error).startswith("all 2 attempts failed (max_failures=1):\n  attempt 0: RuntimeError: first")


def test_a_lone_attempts_error_is_the_final_error_and_a_rescaled_attempt_is_no_failure() -> None:
    lone = DoNotRetry("y")
    assert final_error([failed(0, lone)], RetryPolicy(max_failures=3), lone) is lone
    rescaled = AttemptRecord(0, 100.0, ended_at=101.0, rescaled=True)
    attempts = [rescaled, failed(1, RuntimeError("lost")), failed(2, DoNotRetry("stop"))]
    error = final_error(attempts, RetryPolicy(max_failures=3), DoNotRetry("stop"))
    assert str(error).splitlines() == [
        "attempt 2 failed with an error that is not retried:",
        "  attempt 1: RuntimeError: lost",
        "  attempt 2: DoNotRetry: stop",
    ]


@pytest.mark.parametrize(
    ("decision", "end"),
    [
        (Retry(RuntimeError("lost\nmore")), "lost; starting the next attempt from the latest checkpoint"),
        (Fail(Why.NO_ATTEMPTS_LEFT, RuntimeError("lost")), "lost; no attempts left"),
        (Fail(Why.NOT_RETRIED, DoNotRetry("stop")), "stop; this error is not retried"),
        (Fail(Why.INTERRUPTED, KeyboardInterrupt()), "KeyboardInterrupt"),
    ],
    ids=["retry", "spent", "not-retried", "interrupted"],
)
def test_the_line_for_a_failed_attempt_says_what_comes_next(decision: Retry | Fail, end: str) -> None:
    assert failure_line(failed(1, decision.error), decision) == f"attempt 1 failed after 1.5 s: {end}"
