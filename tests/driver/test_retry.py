"""RetryPolicy and the attempt loop, driven by scripted attempts (no Spark, no ranks)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sparkrunner.driver.attempts import RetryPolicy, run_attempts
from sparkrunner.driver.elastic import Rescaled
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


def scripted(outcomes: list[BaseException | str]) -> Callable[[int], str]:
    """Attempt n raises outcomes[n], or returns it."""

    def attempt(number: int) -> str:
        outcome = outcomes[number]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return attempt


def run(policy: RetryPolicy, outcomes: list[BaseException | str]) -> tuple[list[AttemptRecord], list[str]]:
    attempts: list[AttemptRecord] = []
    calls: list[str] = []
    try:
        calls.append(
            run_attempts(policy, attempts, scripted(outcomes), lambda: 7, lambda: calls.append("wait"))
        )
    except BaseException as exc:
        calls.append(f"raised {type(exc).__name__}")
    return attempts, calls


@pytest.mark.parametrize(
    ("max_failures", "outcomes", "calls", "attempts"),
    [
        (0, ["ok"], ["ok"], 1),
        (0, [RuntimeError("x")], ["raised RuntimeError"], 1),  # no retries: the error itself
        (2, [RuntimeError("x"), "ok"], ["wait", "ok"], 2),
        (2, [RuntimeError("x"), RuntimeError("y"), "ok"], ["wait", "wait", "ok"], 3),
        (1, [RuntimeError("x"), RuntimeError("y")], ["wait", "raised AttemptsFailedError"], 2),
        (3, [RuntimeError("x"), DoNotRetry("y")], ["wait", "raised AttemptsFailedError"], 2),
        (3, [DoNotRetry("y")], ["raised DoNotRetry"], 1),  # one attempt: its own error
    ],
)
def test_attempts_run_until_one_succeeds_or_the_policy_stops(
    max_failures: int, outcomes: list[BaseException | str], calls: list[str], attempts: int
) -> None:
    records, seen = run(RetryPolicy(max_failures=max_failures), outcomes)
    assert seen == calls
    assert [r.number for r in records] == list(range(attempts))
    assert all(r.ended_at is not None for r in records)
    assert [r.resumed_from_step for r in records] == [None] + [7] * (attempts - 1)
    assert [type(r.error) for r in records] == [
        type(o) if isinstance(o, BaseException) else type(None) for o in outcomes[:attempts]
    ]


def test_the_final_error_carries_every_attempts_error() -> None:
    errors: list[BaseException | str] = [RuntimeError("first"), RuntimeError("second")]
    with pytest.raises(AttemptsFailedError, match="all 2 attempts failed") as info:
        run_attempts(RetryPolicy(max_failures=1), [], scripted(errors), lambda: None, lambda: None)
    assert info.value.errors == errors


def test_a_rescale_starts_the_next_attempt_without_using_up_a_failure() -> None:
    """An elastic run's rescale (`Rescaled`) is no failure: max_failures=1 still has its retry left."""
    records, seen = run(RetryPolicy(max_failures=1), [Rescaled(2, 4), RuntimeError("lost"), "ok"])
    assert seen == ["wait", "ok"], "only a failed attempt waits for the cluster before the next one"
    assert [(r.error is not None, r.rescaled) for r in records] == [
        (False, True),
        (True, False),
        (False, False),
    ]
