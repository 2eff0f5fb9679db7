"""The run controller's loop, stepped: the real `RunController` with a stand-in placement and a stand-in
supervisor (no rank starts; each attempt's supervisor answers from the test's script), its states seen through
the `on_state` hook. Then `decide` on its own, and one real run (np=-1 on the driver, launcher direct) through
the same hook, its ranks as the oracle of each attempt's id. The loop also runs in every behaviour test of a
run (tests/recovery, tests/runner)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import sparkrunner
from sparkrunner import Runner
from sparkrunner.common.rank_job import RankJob
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.controller import (
    AttemptEnd,
    RunController,
    RunFailed,
    State,
    Stopping,
    decide,
)
from sparkrunner.driver.elastic import Resize, Sizing
from sparkrunner.driver.in_flight import InFlightWatch
from sparkrunner.driver.open_run import RunCall, RunOutputs
from sparkrunner.driver.retry_policy import Done, Fail, Retry, RetryPolicy, Why
from sparkrunner.driver.supervisor import (
    Cancelled,
    Outcome,
    RanksFailed,
    RanksSucceeded,
    StillRunning,
    TimedOut,
    error_of,
)
from sparkrunner.errors import (
    AttemptsFailedError,
    DoNotRetry,
    NotEnoughSlotsError,
    RankFailedError,
    ResultNotUnpicklableError,
    RunCancelledError,
    RunTimeoutError,
    StartTimeoutError,
)
from sparkrunner.launch import Launcher
from sparkrunner.observe.observers import AttemptRecord
from sparkrunner.options import RunOptions, parse_np
from sparkrunner.placement import QuietPlacement
from sparkrunner.placement.factory import ColdPlacements
from sparkrunner.timeouts import ELASTIC_WAIT_S


def lost_rank() -> RankFailedError:
    return RankFailedError(1, "RankProcessDied", "rank 1 died", "")


Step = Outcome | BaseException | Callable[[AttemptChannel], Outcome]
"""One answer of a stand-in supervisor's `step()`: an outcome, an error it raises, or what a call returns."""


class StandInPlacement(QuietPlacement):
    """Stands in for a placement: starts no process; `stop` (the shutdown) raises what the test queued, once."""

    def __init__(self, stop_raises: BaseException | None = None):
        self.stop_raises = stop_raises
        self.started: RankJob | None = None
        self.stops = 0

    def start(self, job: RankJob, description: str = "") -> None:
        self.started = job

    def stop(self) -> None:
        self.stops += 1
        raises, self.stop_raises = self.stop_raises, None
        if raises is not None:
            raise raises

    def finished(self) -> bool:
        return True


class StandInSupervisor:
    """Stands in for the supervisor of one attempt: each `step()` answers the next of the test's steps."""

    def __init__(self, channel: AttemptChannel, steps: list[Step]) -> None:
        self.channel, self.steps = channel, iter(steps)

    def step(self) -> Outcome:
        answer = next(self.steps)
        if isinstance(answer, BaseException):
            raise answer
        return answer(self.channel) if callable(answer) else answer


class StandInScaling(Sizing):
    """Stands in for the scaling policy of an elastic run np=(2, 4) (no Spark): the first attempt gets `first`
    ranks, and the first time the loop asks whether a smaller attempt grows, it grows to `grows_to` (capped at
    max). It records what the loop asked."""

    def __init__(self, first: int, grows_to: int) -> None:
        super().__init__(4, None, 1)
        self.least, self.first, self.grows_to = 2, first, grows_to
        self.np_asked: list[int] = []
        self.grow_asked: list[int] = []

    @property
    def elastic(self) -> bool:
        return True

    def np_for(self, attempt: int, slots: int | None) -> int:
        self.np_asked.append(attempt)
        return self.first

    def grow(self, np: int, slots: int | None, connected: int) -> Resize | None:
        self.grow_asked.append(np)
        return Resize(np, min(self.grows_to, self.np)) if np < self.np else None


class Stepped:
    """The real controller of a driver-only run (np=-2), its placements and supervisors the stand-ins above,
    each attempt's supervisor answering `attempts[n]`; `states` holds every state the loop entered. It is the
    run's placement factory too: each placement check raises the next of `checks` (None: it passes)."""

    def __init__(
        self,
        *attempts: list[Step],
        max_failures: int = 2,
        sizing: Sizing | None = None,
        placements: Iterator[StandInPlacement] | None = None,
        checks: Sequence[BaseException | None] = (),
    ) -> None:
        options = RunOptions(
            np=-2, launcher="direct", max_failures=max_failures, cold_start=True, stop_grace_s=1
        )
        self.states: list[State] = []
        self.placements: list[StandInPlacement] = []
        self._more, self._checks = placements, iter(checks)
        scripts = iter(attempts)
        self.outputs = RunOutputs()
        self.controller = RunController(
            options,
            [],
            self,
            InFlightWatch(),
            scaling=None if sizing is None else lambda per_task: sizing,
            supervisor=lambda channel, placement, deadline: StandInSupervisor(channel, next(scripts)),
            on_state=self.states.append,
        )

    def check(self, launcher: Launcher, spark: Any, tasks: int) -> None:
        raises = next(self._checks, None)
        if raises is not None:
            raise raises

    def __call__(self, launcher: Launcher, spark: Any, tasks: int) -> StandInPlacement:
        placement = next(self._more) if self._more is not None else StandInPlacement()
        self.placements.append(placement)
        return placement

    def run(self) -> list[Any]:
        return self.controller.run(RunCall(lambda: None, (), {}, "main", every_rank=False), self.outputs)

    @property
    def names(self) -> list[str]:
        return [type(s).__name__ for s in self.states]

    @property
    def attempts(self) -> list[Any]:
        assert self.outputs.last_run is not None
        return self.outputs.last_run.attempts


ONE_ATTEMPT = ["Checking", "Placing", "AttemptRunning", "Stopping"]


def test_a_failed_attempt_restarts_and_the_next_one_succeeds() -> None:
    run = Stepped([StillRunning(), RanksFailed(lost_rank())], [RanksSucceeded()])
    assert run.run() == [None]
    assert run.names == [*ONE_ATTEMPT, "Restarting", *ONE_ATTEMPT[1:], "RunSucceeded"]
    first, second = run.attempts
    assert first.error is not None and second.error is None and second.attempt_id.endswith("-attempt1")
    started = [p.started for p in run.placements if p.started is not None]
    assert [job.attempt_id for job in started] == [first.attempt_id, second.attempt_id]


def test_failures_count_restarts_only_and_the_run_fails_when_they_are_spent() -> None:
    run = Stepped([RanksFailed(lost_rank())], [RanksFailed(lost_rank())], [RanksFailed(lost_rank())])
    with pytest.raises(AttemptsFailedError, match="all 3 attempts failed"):
        run.run()
    assert run.names.count("Restarting") == 2 and run.names[-1] == "RunFailed"
    failed = run.states[-1]
    assert isinstance(failed, RunFailed) and failed.fail.why is Why.NO_ATTEMPTS_LEFT


def test_ctrl_c_during_the_second_attempt_stays_an_interrupt_and_the_record_says_so() -> None:
    run = Stepped([RanksFailed(lost_rank())], [StillRunning(), KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt) as raised:
        run.run()
    assert run.names == [*ONE_ATTEMPT, "Restarting", *ONE_ATTEMPT[1:], "RunFailed"]
    first, second = run.attempts
    assert isinstance(first.error, RankFailedError) and second.error is raised.value
    assert run.outputs.last_run is not None and run.outputs.last_run.error is raised.value
    assert raised.value.__notes__ == [
        f"the run was interrupted during attempt 1\n  attempt 0: RankFailedError: {first.error}"
    ]
    assert all(p.stops for p in run.placements if p.started is not None), "every placement ended"


def test_a_second_ctrl_c_ends_the_shutdown_at_once_and_the_interrupt_reaches_the_caller() -> None:
    """The attempt failed; Ctrl-C while its placement stops: the rest goes at once, and the run raises it."""
    placements = iter([StandInPlacement(stop_raises=KeyboardInterrupt())])
    run = Stepped([RanksFailed(lost_rank())], placements=placements)
    with pytest.raises(KeyboardInterrupt) as raised:
        run.run()
    assert isinstance(raised.value.__context__, RankFailedError)
    assert run.names == [*ONE_ATTEMPT, "RunFailed"], "an interrupt is not retried"
    assert run.placements[0].stops == 2, "the shutdown's stop, then the one that kills what is left"


@pytest.mark.parametrize(
    "error", [NotEnoughSlotsError("np=2"), KeyboardInterrupt()], ids=lambda e: type(e).__name__
)
def test_the_restarts_slot_wait_ends_the_run_like_any_failure(error: BaseException) -> None:
    run = Stepped(
        [RanksFailed(lost_rank())], checks=[None, error]
    )  # the run's check passes, the restart's not
    expected = type(error) if isinstance(error, KeyboardInterrupt) else AttemptsFailedError
    with pytest.raises(expected) as raised:
        run.run()
    assert run.names == [*ONE_ATTEMPT, "Restarting", "Placing", "Stopping", "RunFailed"]
    assert run.attempts[1].error is error
    if expected is AttemptsFailedError:
        assert raised.value.__cause__ is error
        assert "attempt 1 failed with an error that is not retried" in str(raised.value)


def unpicklable(channel: AttemptChannel) -> Outcome:
    """Rank 0's value, pickled on a rank that could import `trainer_only.Model` (protocol 0: GLOBAL)."""
    channel.report.results[0] = b"ctrainer_only\nModel\n(tR."
    return RanksSucceeded()


def test_a_result_the_driver_cannot_unpickle_ends_the_run_after_one_attempt() -> None:
    run = Stepped([unpicklable], [RanksSucceeded()])
    with pytest.raises(ResultNotUnpicklableError) as raised:
        run.run()
    assert run.names == [*ONE_ATTEMPT, "RunFailed"] and len(run.attempts) == 1
    assert "rank 0's return value could not be unpickled on the driver" in str(raised.value)
    assert "It is a trainer_only.Model; return plain Python" in str(raised.value)
    assert isinstance(raised.value.__cause__, ModuleNotFoundError)


def test_the_scaling_policy_grows_the_run_and_the_next_attempt_runs_the_resizes_np() -> None:
    sizing = StandInScaling(first=2, grows_to=6)
    run = Stepped([StillRunning(), RanksSucceeded()], [RanksSucceeded()], max_failures=0, sizing=sizing)
    run.run()
    assert run.names == [*ONE_ATTEMPT, "Resizing", *ONE_ATTEMPT[1:], "RunSucceeded"]
    assert run.states[4].resize == Resize(2, 4)  # type: ignore[union-attr]  # capped at max
    assert [a.world_size for a in run.attempts] == [2, 4] and run.attempts[0].rescaled
    assert sizing.np_asked == [0], "the resize's np is used, not chosen again"
    assert sizing.grow_asked == [2], "asked between steps of the smaller attempt only, until it decided"


def test_a_stop_asked_reaches_the_loop_and_a_failure_after_it_is_not_retried() -> None:
    asked: list[bool] = []

    def ask(channel: AttemptChannel) -> Outcome:
        asked.append(run.controller.ask_to_stop("stop"))
        return StillRunning()

    run = Stepped([ask, StillRunning(), RanksFailed(lost_rank())], [RanksSucceeded()])
    with pytest.raises(RankFailedError):
        run.run()
    stopping = next(s for s in run.states if isinstance(s, Stopping))
    assert asked == [True] and stopping.end.stop_asked
    assert run.names == [*ONE_ATTEMPT, "RunFailed"]
    assert not run.controller.ask_to_stop("stop"), "no attempt is in flight"


def test_the_scaling_policy_grows_only_a_connected_attempt_into_more_slots_and_never_waits() -> None:
    """`Sizing` alone, for np=(2, 4) and two ranks per task: it reads no cluster and answers at once; the oracle
    is the arithmetic by hand (slots x ranks per task, capped at max)."""
    sizing = Sizing(*parse_np((2, 4)), ranks_per_task=2)
    assert [sizing.ranks_in(slots) for slots in (None, 0, 1, 3)] == [4, 0, 2, 4]
    assert sizing.patience_s(0) == ELASTIC_WAIT_S and sizing.patience_s(1) == 0, (
        "the first attempt waits for max"
    )
    assert sizing.np_for(1, 0) == 2, "never below min: the controller waited for it"
    assert sizing.grow(2, 3, connected=2) == Resize(2, 4)
    assert sizing.grow(2, 3, connected=1) is None, "not before every rank is connected"
    assert sizing.grow(2, 1, connected=2) is None, "one slot holds no more ranks than the attempt has"
    assert sizing.grow(4, 8, connected=4) is None and not sizing.can_grow(4), "max"


FIXED = RetryPolicy(2)


@pytest.mark.parametrize(
    ("end", "failures", "decision"),
    [
        (AttemptEnd(error_of(RanksSucceeded())), 0, Done()),
        (AttemptEnd(error_of(RanksFailed(lost_rank()))), 1, Retry),
        (AttemptEnd(error_of(RanksFailed(lost_rank()))), 2, Why.NO_ATTEMPTS_LEFT),
        (AttemptEnd(error_of(Cancelled(RunCancelledError("cancelJobGroup")))), 0, Why.NOT_RETRIED),
        (AttemptEnd(error_of(TimedOut(RunTimeoutError("timeout=5")))), 0, Why.NOT_RETRIED),
        (
            AttemptEnd(RankFailedError(0, "DoNotRetry", "no", "", DoNotRetry("no"))),
            0,
            Why.NOT_RETRIED,
        ),
        (AttemptEnd(lost_rank(), stop_asked=True), 0, Why.NOT_RETRIED),
        (AttemptEnd(None, resize=Resize(2, 4)), 0, Resize(2, 4)),
        (AttemptEnd(lost_rank(), resize=Resize(2, 4)), 2, Resize(2, 4)),  # whatever its ranks did then
        (AttemptEnd(KeyboardInterrupt(), resize=Resize(2, 4)), 0, Why.INTERRUPTED),
    ],
    ids=[
        "success",
        "retried",
        "spent",
        "cancelled",
        "timeout",
        "DoNotRetry",
        "stop-asked",
        "resize",
        "resize-raised",
        "interrupt-not-resize",
    ],
)
def test_decide_after_an_attempt(end: AttemptEnd, failures: int, decision: object) -> None:
    """`decision`: the one expected, or `Retry` / a `Why` for the decision that carries the attempt's error."""
    if decision is Retry:
        decision = Retry(end.error)  # type: ignore[arg-type]
    elif isinstance(decision, Why):
        decision = Fail(decision, end.error)  # type: ignore[arg-type]
    assert decide(end, FIXED, failures) == decision


def test_without_retries_the_attempts_own_error_is_raised() -> None:
    error = lost_rank()
    assert decide(AttemptEnd(error), RetryPolicy(0), 0) == Fail(Why.NO_RETRIES, error)


def test_the_users_retry_if_still_decides() -> None:
    policy = RetryPolicy(3, retry_if=lambda e: isinstance(e, StartTimeoutError))
    late = AttemptEnd(error_of(TimedOut(StartTimeoutError("only 1 of 4 ranks started"))))
    assert decide(late, policy, 0) == Retry(late.error)  # type: ignore[arg-type]
    lost = lost_rank()
    assert decide(AttemptEnd(lost), policy, 0) == Fail(Why.NOT_RETRIED, lost)
    assert str(Resize(2, 4)) == "rescaled from 2 to 4 ranks"


def test_an_attempts_id_is_derived_from_its_runs_and_never_equal_to_it() -> None:
    assert [AttemptRecord.id_for("abc", n) for n in (0, 2)] == ["abc-attempt0", "abc-attempt2"]


def test_a_rank_failure_carries_its_original_as_the_cause() -> None:
    original = ValueError("bad")
    error = error_of(RanksFailed(RankFailedError(0, "ValueError", "bad", "", original)))
    assert error is not None and error.__cause__ is original


def fails_on_the_first_attempt() -> tuple[str, str]:
    """Fails on attempt 0, naming the ids its process carries; returns them on the next."""
    ids = os.environ["SPARKRUNNER_ATTEMPT_ID"], os.environ["SPARKRUNNER_RUN_ID"]
    if sparkrunner.rank_context().attempt == 0:
        raise RuntimeError(f"lost on the first attempt: attempt={ids[0]} run={ids[1]}")
    return ids


def test_a_real_run_restarts_once_and_its_records_carry_each_attempts_id() -> None:
    """Placement: np<0, launcher direct, real processes and the real supervisor; the states through the hook."""
    options = RunOptions(np=-1, launcher="direct", max_failures=1)
    states: list[State] = []
    outputs = RunOutputs()
    placements = ColdPlacements(-1, options.start_timeout, None)
    controller = RunController(options, [], placements, InFlightWatch(), on_state=states.append)
    [seen_by_rank] = controller.run(
        RunCall(fails_on_the_first_attempt, (), {}, "f", every_rank=False), outputs
    )
    record = outputs.last_run
    assert record is not None
    first, second = record.attempts
    assert (first.attempt_id, second.attempt_id) == (f"{record.run_id}-attempt0", f"{record.run_id}-attempt1")
    assert seen_by_rank == (second.attempt_id, record.run_id)  # what the rank process carried
    seen_first = f"attempt={first.attempt_id} run={record.run_id}"
    assert seen_first in str(first.error) and first.attempt_id != record.run_id  # attempt 0's process too
    assert isinstance(first.error, RankFailedError) and second.error is None
    assert first.world_size == second.world_size == 1
    assert [type(s).__name__ for s in states] == [
        *ONE_ATTEMPT,
        "Restarting",
        *ONE_ATTEMPT[1:],
        "RunSucceeded",
    ]


def returns_what_only_the_rank_can_import(folder: str) -> object:
    Path(folder, "rank_only_module.py").write_text("class Model:\n    pass\n")
    sys.path.insert(0, folder)
    import rank_only_module

    return rank_only_module.Model()


def test_a_real_result_the_driver_cannot_unpickle_fails_after_one_attempt(tmp_path: Path) -> None:
    """Placement: np<0, launcher direct: the rank returns an object of a module the driver cannot import."""
    runner = Runner(np=-1, launcher="direct", max_failures=2, tracking=False, progress=False)
    with pytest.raises(
        ResultNotUnpicklableError, match=r"It is a rank_only_module\.Model; return plain Python"
    ):
        runner.run(returns_what_only_the_rank_can_import, str(tmp_path))
    assert runner.last_run is not None and len(runner.last_run.attempts) == 1
