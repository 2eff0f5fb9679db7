"""Driver side of the address exchange: every task's `Join`, answered at once when the stage is complete.

The task side (and why this replaces Spark's `allGather`) is `sparkrunner.tasks.address_exchange`.
"""

from __future__ import annotations

import threading

from sparkrunner import channel
from sparkrunner.channel.messages import Join, TaskEntries, Topology, send_to_all


class AddressBook:
    """Driver side: collects every task's `Join` and answers all of them once the stage is complete."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._joined: dict[int, tuple[channel.Connection, TaskEntries]] = {}
        self._spark_task_ids: dict[int, int] = {}

    def spark_task_ids(self) -> dict[int, int]:
        """Barrier task index -> Spark's task id (TID) of every task that joined (none on the driver)."""
        with self._lock:
            return dict(self._spark_task_ids)

    def join(self, conn: channel.Connection, join: Join) -> None:
        """Record one task's entries; the last task of the stage to join releases every waiting task."""
        with self._lock:
            self._joined[join.task] = (conn, list(join.entries))
            self._spark_task_ids[join.task] = join.spark_task_id
            if len(self._joined) < join.tasks:
                return
            joined = [self._joined[index] for index in range(join.tasks)]
        # pickled once for all (a task that is gone is skipped: the stage fails without us)
        send_to_all([waiting for waiting, _ in joined], Topology([entries for _, entries in joined]))
