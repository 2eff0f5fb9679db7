"""The task side of the address exchange (`sparkrunner/tasks/address_exchange.py`) against the real driver channel
(`AttemptChannel`), and how a barrier task reports its end to it (`sparkrunner/tasks/task_report.py`)."""

from __future__ import annotations

import logging
import socket

import pytest

from sparkrunner import channel
from sparkrunner.channel import messages as m
from sparkrunner.channel.payload import dumps_call
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.tasks import address_exchange, task_report


def test_asking_for_stacks_never_reaches_a_task_waiting_in_the_address_exchange() -> None:
    """Driver side, real channel: a barrier task that joined the address exchange gets the topology as its one
    answer, even when `dump_stacks` is called before the last task has joined."""
    session = AttemptChannel(dumps_call(print, (), {}), 2, "all", "127.0.0.1")
    entries = [m.RankAddress("127.0.0.1", (1,), ())]
    waiting = channel.connect(("127.0.0.1", session.port), session.secret)
    try:
        first, second = m.SparkTask(10, 0, {}), m.SparkTask(11, 0, {})
        m.send(waiting, m.Join(task=0, tasks=2, spark=first, entries=entries))
        with session.changed:  # the driver has taken task 0's join
            assert session.changed.wait_for(lambda: 0 in session.spark_task_ids(), timeout=30)
        session.collect_stacks()
        assert address_exchange.exchange(("127.0.0.1", session.port), session.secret, 1, 2, second, entries)
        assert m.receive(waiting) == m.Topology([entries, entries], [first, second])
        assert session.spark_task_ids() == {0: 10, 1: 11}
    finally:
        waiting.close()
        session.close()


def test_a_task_report_reaches_the_driver_channel() -> None:
    """Real channel: the report a barrier task sends when its process ended is in the driver's record."""
    session = AttemptChannel(dumps_call(print, (), {}), 1, "all", "127.0.0.1")
    report = m.TaskReport(task=0, host="127.0.0.1", launcher="direct", exit_code=7, tail="last words")
    try:
        task_report.send(("127.0.0.1", session.port), session.secret, report)
        with session.changed:
            assert session.changed.wait_for(lambda: 0 in session.report.task_reports, timeout=30)
            assert session.report.task_reports[0] == report
    finally:
        session.close()


def test_a_task_report_to_a_driver_that_is_gone_is_only_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """The driver's port is closed (it ended): `send` returns, and the log says which task could not tell."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        gone = probe.getsockname()
    with caplog.at_level(logging.WARNING, logger="sparkrunner.tasks.task_report"):
        task_report.send(gone, channel.new_secret(), m.TaskReport(task=3, host="h", launcher="direct"))
    assert "could not tell the driver how barrier task 3 ended" in caplog.text
