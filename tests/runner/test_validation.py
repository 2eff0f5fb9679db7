"""Bad input gets a typed, explanatory error before any process is started."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sparkrunner import HorovodRunner, Runner
from sparkrunner.errors import InvalidArgumentError, NotPicklableError
from tests.helpers import leftover_rank_processes, run_driver


def noop() -> None:
    return None


@pytest.mark.parametrize("np", [0, "2", 1.5, True, None])
def test_bad_np(np: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="np"):
        Runner(np=np)


def test_np_zero_explains_both_modes() -> None:
    with pytest.raises(InvalidArgumentError, match=r"np > 0.*np < 0"):
        Runner(np=0)


def test_bad_verbosity_names_the_choices() -> None:
    with pytest.raises(InvalidArgumentError, match="log_callback_only"):
        Runner(np=-1, driver_log_verbosity="loud")
    with pytest.raises(InvalidArgumentError, match="driver_log_verbosity"):
        HorovodRunner(np=-1, driver_log_verbosity="none")


@pytest.mark.parametrize("name", ["start_timeout", "timeout"])
@pytest.mark.parametrize("value", [0, -3, "10"])
def test_bad_timeouts(name: str, value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=name):
        Runner(np=-1, **{name: value})


def test_non_callable_main() -> None:
    with pytest.raises(InvalidArgumentError, match="main must be a function"):
        Runner(np=-1).run(42)  # type: ignore[arg-type]


def test_unknown_launcher() -> None:
    with pytest.raises(InvalidArgumentError, match="launcher='ssh' is unknown"):
        Runner(np=-1, launcher="ssh").run(noop)


def test_unpicklable_closure_names_the_culprit() -> None:
    guard = threading.Lock()

    def train() -> None:
        with guard:
            pass

    with pytest.raises(NotPicklableError, match=r"variable 'guard' captured by train \(a lock\)"):
        Runner(np=-2).run(train)
    assert leftover_rank_processes() == {}


def test_unpicklable_argument_names_the_argument() -> None:
    with pytest.raises(NotPicklableError, match=r"argument 'lock'"):
        Runner(np=-2).run(lambda lock: None, lock=threading.RLock())


@pytest.mark.slow
def test_np_positive_without_spark_session_is_explained() -> None:
    """In a fresh driver process (this one may hold another module's SparkSession)."""
    out = run_driver("no_session")
    assert (
        "REFUSED: np > 0 runs the ranks in a Spark barrier stage, but this process has no SparkSession" in out
    ), out
