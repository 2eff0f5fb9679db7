"""How the other barrier tasks of an mpirun run learn that task 0's mpirun has ended.

They used to wait in a second `BarrierTaskContext.barrier()`. Spark cannot cancel a task that waits there
cleanly: the executor's barrier thread dies with `TaskKilledException` and takes the executor with it
("Command exited with code 50"), so every failed, timed-out or cancelled run cost an executor. Instead each
task asks task 0 over an authenticated connection and blocks on a plain socket, which cancellation (it kills
the task's Python worker) ends without harm.
"""

from __future__ import annotations

import contextlib
import threading
import time

from sparkrunner import channel
from sparkrunner.channel import ChannelServer, Connection
from sparkrunner.channel import messages as m
from sparkrunner.common.rank_job import TaskOutcome
from sparkrunner.timeouts import RUN_END_CONNECT_WAIT_S, RUN_END_TELL_WAIT_S
from sparkrunner.topology import PortUse, Topology


class RunEndServer:
    """Runs in task 0 while mpirun runs; answers every other task's WAIT once `ended` is called."""

    def __init__(self, key: bytes, topology: Topology) -> None:
        self._expected = topology.num_tasks - 1  # one WAIT per other task, whatever its ranks
        self._outcome: TaskOutcome | None = None
        self._ended = threading.Event()
        self._told = threading.Semaphore(0)
        task_zero = topology.peers[0]
        # bound to the address the other tasks use, never every interface
        self._server = ChannelServer(
            key,
            m.serving(self._on_message),
            lambda _: None,
            task_zero.host,
            task_zero.ports[PortUse.RUN_END],
        )

    def _on_message(self, conn: Connection, message: m.Message) -> None:
        if not isinstance(message, m.Wait):
            return
        self._ended.wait()
        assert self._outcome is not None
        with contextlib.suppress(channel.ChannelError):
            m.send(conn, m.Exit(self._outcome.exit_code, ""))
        self._told.release()

    def ended(self, outcome: TaskOutcome) -> None:
        """Tell every task that mpirun ended (waiting a little for tasks that have not asked yet), then close."""
        self._outcome = outcome
        self._ended.set()
        deadline = time.monotonic() + RUN_END_TELL_WAIT_S
        for _ in range(self._expected):
            if not self._told.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
        self._server.close()


def wait_for_run_end(key: bytes, topology: Topology) -> TaskOutcome:
    """In a task other than 0: block until task 0 says its mpirun ended (or task 0 is gone)."""
    task_zero = topology.peers[0]
    try:
        conn = channel.connect_when_listening(
            (task_zero.host, task_zero.ports[PortUse.RUN_END]), key, RUN_END_CONNECT_WAIT_S
        )
        m.send(conn, m.Wait())
        answer = m.receive(conn)
        conn.close()
    except channel.ChannelError as exc:
        return TaskOutcome(1, f"lost touch with barrier task 0 before its mpirun ended: {exc}")
    match answer:
        case m.Exit():
            return TaskOutcome(0, "")
        case _:
            return TaskOutcome(1, f"task 0 answered {answer.kind!r}")
