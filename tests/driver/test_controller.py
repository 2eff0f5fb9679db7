"""The run controller's transitions: how an ended attempt (its typed end) and the real policies choose the next
state; and one real run (np=-1 on the driver, launcher direct) through PLACING, RUNNING, STOPPING, RESTARTING and
SUCCEEDED, its ranks as the oracle of each attempt's id. The loop also runs in every behaviour test of a run
(tests/recovery, tests/runner)."""

from __future__ import annotations

import logging
import os

import pytest

import sparkrunner
from sparkrunner import Runner
from sparkrunner.driver.attempts import FailureDecision, RetryPolicy, StopDecision, StopPolicy
from sparkrunner.driver.controller import Attempt, AttemptEnd, Decision, RunState, decide
from sparkrunner.driver.elastic import Resize, Sizing
from sparkrunner.driver.supervisor import Cancelled, Failed, Succeeded, TimedOut, error_of
from sparkrunner.errors import (
    DoNotRetry,
    RankFailedError,
    RunCancelledError,
    RunTimeoutError,
    StartTimeoutError,
)
from sparkrunner.options import SizeRange

FIXED = Sizing(4, None, None, 1, 1.0)
ELASTIC = Sizing(4, SizeRange(2, 4), None, 1, 1.0)
"""Spark runs of np=4 and np=(2, 4); deciding reads no cluster, so no Spark session is needed."""


def lost_rank() -> RankFailedError:
    return RankFailedError(1, "RankProcessDied", "rank 1 died", "")


def test_a_success_succeeds() -> None:
    assert decide(AttemptEnd(4, error_of(Succeeded())), FIXED, RetryPolicy(2), 0) == Decision(
        RunState.SUCCEEDED
    )


def test_a_retryable_failure_with_attempts_left_restarts() -> None:
    end = AttemptEnd(4, error_of(Failed(lost_rank())))
    assert decide(end, FIXED, RetryPolicy(2), 1) == Decision(RunState.RESTARTING, FailureDecision.RETRY)


def test_a_failure_once_the_attempts_are_spent_fails() -> None:
    end = AttemptEnd(4, error_of(Failed(lost_rank())))
    assert decide(end, FIXED, RetryPolicy(2), 2) == Decision(
        RunState.FAILED, FailureDecision.NO_ATTEMPTS_LEFT
    )


def test_without_retries_the_attempts_own_error_is_raised() -> None:
    end = AttemptEnd(4, error_of(Failed(lost_rank())))
    assert decide(end, FIXED, RetryPolicy(0), 0) == Decision(RunState.FAILED, FailureDecision.RAISE)


@pytest.mark.parametrize(
    "ended",
    [
        Cancelled(RunCancelledError("cancelJobGroup")),
        TimedOut(RunTimeoutError("timeout=5")),
        Failed(RankFailedError(0, "DoNotRetry", "no", "", DoNotRetry("no"))),
    ],
    ids=lambda e: type(e).__name__,
)
def test_what_another_attempt_cannot_fix_fails_at_once(ended: Cancelled | TimedOut | Failed) -> None:
    end = AttemptEnd(4, error_of(ended))
    assert decide(end, FIXED, RetryPolicy(5), 0) == Decision(RunState.FAILED, FailureDecision.NOT_RETRIED)


def test_the_users_retry_if_still_decides() -> None:
    policy = RetryPolicy(3, retry_if=lambda e: isinstance(e, StartTimeoutError))
    late = AttemptEnd(4, error_of(TimedOut(StartTimeoutError("only 1 of 4 ranks started"))))
    assert decide(late, FIXED, policy, 0).state is RunState.RESTARTING
    assert decide(AttemptEnd(4, lost_rank()), FIXED, policy, 0).state is RunState.FAILED


@pytest.mark.parametrize("error", [None, lost_rank()], ids=["returned", "raised"])
def test_an_attempt_stopped_for_more_slots_resizes_whatever_its_ranks_did(
    error: BaseException | None,
) -> None:
    end = AttemptEnd(2, error, grown_to=4)
    assert decide(end, ELASTIC, RetryPolicy(0), 0) == Decision(RunState.RESIZING, Resize(2, 4))
    assert str(Resize(2, 4)) == "rescaled from 2 to 4 ranks"


def test_an_interrupt_is_never_a_resize() -> None:
    end = AttemptEnd(2, KeyboardInterrupt(), grown_to=4)
    assert decide(end, ELASTIC, RetryPolicy(3), 0) == Decision(RunState.FAILED, FailureDecision.NOT_RETRIED)


def test_a_run_walks_restart_resize_restart_then_fails_when_its_failures_are_spent() -> None:
    """The loop's bookkeeping: failures count restarts only, a resize spends none."""
    ends = [
        AttemptEnd(2, lost_rank()),
        AttemptEnd(2, None, grown_to=4),
        AttemptEnd(4, lost_rank()),
        AttemptEnd(4, lost_rank()),
    ]
    states, failures = [], 0
    for end in ends:
        state = decide(end, ELASTIC, RetryPolicy(2), failures).state
        failures += state is RunState.RESTARTING
        states.append(state)
    assert states == [RunState.RESTARTING, RunState.RESIZING, RunState.RESTARTING, RunState.FAILED]


def test_an_attempt_is_its_number_its_id_and_its_np() -> None:
    assert Attempt.of("abc", 0, 4) == Attempt(0, "abc", 4)
    assert Attempt.of("abc", 2, 3).id == "abc-attempt2"


def test_the_stop_policy_lets_succeeded_ranks_exit_and_stops_the_others() -> None:
    assert StopPolicy(5.0).decide(succeeded=True) is StopDecision.LET_EXIT
    assert StopPolicy(5.0).decide(succeeded=False) is StopDecision.STOP


def test_a_rank_failure_carries_its_original_as_the_cause() -> None:
    original = ValueError("bad")
    error = error_of(Failed(RankFailedError(0, "ValueError", "bad", "", original)))
    assert error is not None and error.__cause__ is original


def fails_on_the_first_attempt() -> tuple[str, str]:
    if sparkrunner.rank_context().attempt == 0:
        raise RuntimeError("lost on the first attempt")
    return os.environ["SPARKRUNNER_ATTEMPT_ID"], os.environ["SPARKRUNNER_RUN_ID"]


def test_a_real_run_restarts_once_and_its_records_carry_each_attempts_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = Runner(np=-1, launcher="direct", max_failures=1, tracking=False, progress=False)
    with caplog.at_level(logging.DEBUG, logger="sparkrunner.driver.controller"):
        seen_by_rank = runner.run(fails_on_the_first_attempt)
    record = runner.last_run
    assert record is not None
    first, second = record.attempts
    assert (first.attempt_id, second.attempt_id) == (record.run_id, f"{record.run_id}-attempt1")
    assert seen_by_rank == (second.attempt_id, record.run_id)  # what the rank process carried
    assert isinstance(first.error, RankFailedError) and second.error is None
    assert first.world_size == second.world_size == 1
    states = [
        r.getMessage().split(": ")[1].split(" ")[0] for r in caplog.records if "(attempt " in r.getMessage()
    ]
    assert states == [
        "placing",
        "running",
        "stopping",
        "restarting",
        "placing",
        "running",
        "stopping",
        "succeeded",
    ]
