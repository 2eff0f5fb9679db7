"""The typed errors (pure logic, no Spark): a dead rank's exit code and signal, a vanished run, `DoNotRetry`
recognised by its type even when what it wraps cannot cross the wire."""

from __future__ import annotations

import pickle
import signal
import threading

import pytest

from sparkrunner.channel.payload import RemoteError
from sparkrunner.driver.attempt.task_reports import exit_text
from sparkrunner.driver.retry_policy import RetryPolicy
from sparkrunner.errors import (
    DoNotRetry,
    NotPicklableError,
    RankFailedError,
    RankProcessDiedError,
    RanksVanishedError,
    ResultNotPicklableError,
)
from sparkrunner.launch.mpirun import rank_exit_from_banner


@pytest.mark.parametrize(
    ("code", "name", "words"),
    [
        (-signal.SIGKILL, "SIGKILL", "exit code -9 (killed by SIGKILL)"),
        (-signal.SIGSEGV, "SIGSEGV", "exit code -11 (killed by SIGSEGV)"),
        (3, None, "exit code 3"),
        (-200, None, "exit code -200"),  # no such signal: the number alone
    ],
)
def test_a_dead_rank_carries_its_exit_code_and_signal(code: int, name: str | None, words: str) -> None:
    error = RankProcessDiedError(1, f"its process ended: {exit_text(code)}", "barrier task 0", ("bye",), code)
    assert isinstance(error, RankFailedError) and error.exc_type == "RankProcessDied"  # compatible
    assert (error.exit_code, error.signal) == (code, name)
    assert words in str(error) and "bye" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is RankProcessDiedError
    assert (copy.rank, copy.exit_code, copy.signal, str(copy)) == (1, code, name, str(error))


def test_an_unknown_exit_has_no_code_and_no_signal() -> None:
    error = RankProcessDiedError(0, "its process ended without reporting a result")
    assert (error.exit_code, error.signal) == (None, None)


def test_vanished_ranks_say_how_many_and_why() -> None:
    error = pickle.loads(pickle.dumps(RanksVanishedError(2, "executor lost")))
    assert (error.missing, error.detail) == (2, "executor lost")
    assert str(error) == "2 rank(s) never reported a result: executor lost"


def test_an_unpicklable_result_is_a_not_picklable_error() -> None:
    assert issubclass(ResultNotPicklableError, NotPicklableError) and issubclass(
        ResultNotPicklableError, TypeError
    )


def test_do_not_retry_wrapping_something_unpicklable_is_still_never_retried() -> None:
    try:
        raise DoNotRetry(RuntimeError(threading.Lock()))  # the lock cannot be pickled
    except DoNotRetry as exc:
        remote = RemoteError.capture(exc)
    error = remote.to_error(1)
    assert isinstance(error.original, DoNotRetry), error.original
    assert "RuntimeError" in str(error.original)
    assert not RetryPolicy(max_failures=5).retryable(error)
    assert RetryPolicy(max_failures=5).retryable(RemoteError.capture(RuntimeError("x")).to_error(1))


_BANNER = """--------------------------------------------------------------------------
mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).
--------------------------------------------------------------------------"""


@pytest.mark.parametrize(("rank", "code"), [(1, -9), (0, None), (10, None)])
def test_mpirun_banner_names_the_signal_of_that_rank_only(rank: int, code: int | None) -> None:
    assert rank_exit_from_banner(_BANNER, rank) == code


def test_mpirun_banner_without_a_signal_says_nothing() -> None:
    assert rank_exit_from_banner("Primary job  terminated normally, but 1 process returned\n", 1) is None


_EXIT_BANNER = """--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[938,1],1]
  Exit code:    3
--------------------------------------------------------------------------"""
"""Open MPI 4's words (as mpirun printed them here) when rank 1 called os._exit(3) first."""


@pytest.mark.parametrize(("rank", "code"), [(1, 3), (0, None), (11, None)])
def test_mpirun_banner_names_the_exit_code_of_that_rank_only(rank: int, code: int | None) -> None:
    assert rank_exit_from_banner(_EXIT_BANNER, rank) == code


def test_every_public_name_of_the_errors_module_is_an_exception_class() -> None:
    """`sparkrunner.errors` holds errors and warnings only (its import machinery, extras table and stack-report
    types live in their own modules); the oracle is the module's own namespace, read at run time."""
    import sparkrunner.errors

    public = {name: value for name, value in vars(sparkrunner.errors).items() if not name.startswith("_")}
    assert len(public) > 20, sorted(public)
    not_errors = sorted(
        name
        for name, value in public.items()
        if not (isinstance(value, type) and issubclass(value, Exception))
    )
    assert not_errors == [], f"public names of sparkrunner.errors that are no exception class: {not_errors}"
