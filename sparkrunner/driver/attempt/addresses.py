"""Driver side of the address exchange: every task's `Join`, answered at once when the stage is complete.

The task side (and why this replaces Spark's `allGather`) is `sparkrunner.tasks.address_exchange`.
"""

from __future__ import annotations

import logging
import threading

from sparkrunner import channel
from sparkrunner.channel.messages import Join, SparkTask, TaskEntries, Topology, send_to_all

log = logging.getLogger(__name__)


class AddressBook:
    """Driver side: collects every task's `Join` and answers all of them once the stage is complete."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._joined: dict[int, tuple[channel.Connection, TaskEntries, SparkTask]] = {}

    def spark_task_ids(self) -> dict[int, int]:
        """Barrier task index -> Spark's task id (TID) of every task that joined (none on the driver)."""
        with self._lock:
            return {task: spark.task_attempt_id for task, (_, _, spark) in self._joined.items()}

    def join(self, conn: channel.Connection, join: Join) -> None:
        """Record one task's entries; the last task of the stage to join releases every waiting task."""
        with self._lock:
            self._joined[join.task] = (conn, list(join.entries), join.spark)
            log.debug(
                "barrier task %d joined the address exchange (%d of %d)",
                join.task,
                len(self._joined),
                join.tasks,
            )
            if len(self._joined) < join.tasks:
                return
            joined = [self._joined[index] for index in range(join.tasks)]
        answer = Topology([entries for _, entries, _ in joined], [spark for _, _, spark in joined])
        # pickled once for all (a task that is gone is skipped: the stage fails without us)
        send_to_all([waiting for waiting, _, _ in joined], answer)
