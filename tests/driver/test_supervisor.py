"""`Supervisor.step` over a real attempt channel and a real rank process: each case gives its typed outcome.

The rank's messages are sent by this test over a real channel connection; its process is a real `sleep`, so
the placement knows a live rank (np<0 placement, direct launcher).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sparkrunner.channel import Connection, connect
from sparkrunner.channel import messages as m
from sparkrunner.channel.payload import RemoteError, dumps_call
from sparkrunner.common.rank_job import RankJob
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.attempt.stacks import StallWatch
from sparkrunner.driver.supervisor import (
    Outcome,
    RanksFailed,
    RanksSucceeded,
    RunDeadline,
    Stalled,
    StillRunning,
    Supervisor,
    TimedOut,
)
from sparkrunner.errors import RankFailedError, RunTimeoutError, StallError, StartTimeoutError
from sparkrunner.launch.direct import DirectLauncher
from sparkrunner.placement.local import LocalPlacement
from sparkrunner.system.processes import RankProcess
from sparkrunner.topology import Topology


class _SleepingRank(DirectLauncher):
    """One real rank process that lives until the placement stops it."""

    def start_local(self, job: RankJob, topology: Topology) -> list[RankProcess]:
        return [RankProcess(["sleep", "600"], {"PATH": os.environ["PATH"]})]


@pytest.fixture()
def attempt() -> Iterator[tuple[AttemptChannel, LocalPlacement]]:
    session = AttemptChannel(dumps_call(print, (), {}), 1, "all", "127.0.0.1")
    placement = LocalPlacement(1, _SleepingRank())
    placement.start(RankJob("run", ("127.0.0.1", session.port), session.secret))
    yield session, placement
    placement.stop()
    session.close()


def _rank(session: AttemptChannel) -> Connection:
    """Connect as rank 0 and take the payload, as the rank bootstrap does."""
    conn = connect(("127.0.0.1", session.port), session.secret)
    m.send(conn, m.Hello(rank=0, host="localhost", pid=os.getpid(), task=None))
    assert isinstance(m.receive(conn), m.Payload)
    return conn


def _step(
    session: AttemptChannel,
    placement: LocalPlacement,
    start_timeout: float = 600,
    timeout: float | None = None,
    stall: StallWatch | None = None,
) -> Outcome:
    deadline = RunDeadline.starting_now(timeout)
    supervisor = Supervisor(session, placement, start_timeout, deadline, stall or StallWatch(None, "warn"))
    with session.changed:
        return supervisor.step()


def test_a_connected_rank_that_has_not_reported_is_running(
    attempt: tuple[AttemptChannel, LocalPlacement],
) -> None:
    conn = _rank(attempt[0])
    try:
        assert _step(*attempt) == StillRunning()
    finally:
        conn.close()


def test_a_rank_that_returned_is_success(attempt: tuple[AttemptChannel, LocalPlacement]) -> None:
    conn = _rank(attempt[0])
    try:
        m.send(conn, m.Result(None))
        assert m.receive(conn) == m.Ack()
        assert _step(*attempt) == RanksSucceeded()
    finally:
        conn.close()


def test_a_rank_that_raised_is_a_failure_naming_it(attempt: tuple[AttemptChannel, LocalPlacement]) -> None:
    conn = _rank(attempt[0])
    try:
        m.send(conn, m.Error(RemoteError.capture(ZeroDivisionError("step 3"))))
        assert m.receive(conn) == m.Ack()
        outcome = _step(*attempt)
    finally:
        conn.close()
    assert isinstance(outcome, RanksFailed) and isinstance(outcome.cause, RankFailedError)
    assert (outcome.cause.rank, outcome.cause.exc_type) == (0, "ZeroDivisionError")


def test_no_rank_within_start_timeout_is_a_start_timeout(
    attempt: tuple[AttemptChannel, LocalPlacement],
) -> None:
    outcome = _step(*attempt, start_timeout=0)
    assert isinstance(outcome, TimedOut) and isinstance(outcome.error, StartTimeoutError)
    assert "only 0 of 1 ranks started" in str(outcome.error)


def test_a_run_past_its_timeout_is_a_run_timeout(attempt: tuple[AttemptChannel, LocalPlacement]) -> None:
    conn = _rank(attempt[0])
    try:
        outcome = _step(*attempt, timeout=0)
    finally:
        conn.close()
    assert isinstance(outcome, TimedOut) and isinstance(outcome.error, RunTimeoutError)
    assert outcome.error.stack_report is not None and 0 in outcome.error.stack_report.ranks


@pytest.mark.slow
def test_silence_past_stall_timeout_with_on_stall_fail_is_a_stall(
    attempt: tuple[AttemptChannel, LocalPlacement],
) -> None:
    conn = _rank(attempt[0])
    try:
        outcome = _step(*attempt, stall=StallWatch(0.0, "fail"))
    finally:
        conn.close()
    assert isinstance(outcome, Stalled) and isinstance(outcome.error, StallError)
