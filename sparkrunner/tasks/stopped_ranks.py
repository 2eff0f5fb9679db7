"""A barrier task resumes its stopped processes (SIGSTOP, SIGTSTP) when the driver stops or aborts the run.

A stopped rank cannot read the driver's `Stop`, so the driver would spend the whole stop grace waiting for it,
and only the job's cancellation would end it. On the driver's machine (np < 0) the driver continues such ranks
itself (`AttemptChannel.stop_ranks`); in a Spark run only the task that started them can, so each task listens
to what the driver tells every connection, as task 0 of an mpirun run already does (`run_over.py`). Continued,
the rank reads the `Stop` already waiting for it and ends as any rank does, within its grace.
"""

from __future__ import annotations

import logging
import threading

from sparkrunner import channel
from sparkrunner.channel import messages as m
from sparkrunner.system import processes

log = logging.getLogger(__name__)


class StoppedRanksWatch:
    """While this task's processes run: SIGCONT those of them that are stopped once the driver says stop."""

    def __init__(self, driver: tuple[str, int], secret: bytes, attempt_id: str, task: int) -> None:
        self._attempt_id, self._task = attempt_id, task
        self._conn: channel.Connection | None = None
        try:
            self._conn = channel.connect(driver, secret)
        except channel.ChannelError as exc:
            log.debug(
                "task %d cannot hear the driver's stop (stopped ranks then wait for the grace): %s", task, exc
            )
            return
        threading.Thread(
            target=self._watch, args=(self._conn,), name="sparkrunner-stopped-ranks", daemon=True
        ).start()

    def _watch(self, conn: channel.Connection) -> None:
        try:
            while True:
                if isinstance(m.receive(conn), (m.Stop, m.Abort)):
                    processes.continue_stopped(processes.processes_of_attempt(self._attempt_id, self._task))
        except channel.ChannelError:
            return  # closed: this task's processes ended, or the driver is gone

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
