"""Every barrier task learns every other task's rank addresses, ports and GPUs, through the driver channel.

Spark's own `BarrierTaskContext.allGather` costs every caller at least one second: the executor checks for
the coordinator's answer once a second (`Thread.sleep(1000)` in `BarrierTaskContext.runBarrier`), so even
tasks that arrive together wait that long. The driver channel is already open and authenticated, so each
task sends its entries there (`Message.JOIN`) and the driver answers every task at once (`Message.TOPOLOGY`)
as soon as the last one has joined: milliseconds instead of a second, on every launcher.
"""

from __future__ import annotations

import threading
from typing import Any

from sparkrunner import channel
from sparkrunner.errors import ChannelError
from sparkrunner.protocol import Message

TaskEntries = list[dict[str, Any]]
"""One barrier task's entries: one {"host", "ports", "gpus"} per rank it starts."""


class AddressBook:
    """Driver side: collects every task's `Message.JOIN` and answers all of them once the stage is complete."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._joined: dict[int, tuple[channel.Connection, TaskEntries]] = {}
        self._spark_task_ids: dict[int, int] = {}

    def spark_task_ids(self) -> dict[int, int]:
        """Barrier task index -> Spark's task id (TID) of every task that joined (none on the driver)."""
        with self._lock:
            return dict(self._spark_task_ids)

    def join(self, conn: channel.Connection, data: dict[str, Any]) -> None:
        """Record one task's entries; the last task of the stage to join releases every waiting task."""
        tasks = int(data["tasks"])
        with self._lock:
            self._joined[int(data["task"])] = (conn, list(data["entries"]))
            self._spark_task_ids[int(data["task"])] = int(data["spark_task_id"])
            if len(self._joined) < tasks:
                return
            joined = [self._joined[index] for index in range(tasks)]
        everyone = [entries for _, entries in joined]
        for waiting, _ in joined:
            try:
                waiting.send(Message.TOPOLOGY, everyone)
            except ChannelError:
                continue  # that task is gone: the stage fails without us


def exchange(
    driver: tuple[str, int], secret: bytes, task: int, tasks: int, spark_task_id: int, entries: TaskEntries
) -> list[TaskEntries]:
    """Task side: send this task's entries and block until the driver answers with every task's, in order.

    Blocks as long as a peer task has not started (a barrier stage starts them together; a task that fails
    first fails the stage, and Spark then ends this one)."""
    conn = channel.connect(driver, secret)
    try:
        conn.send(
            Message.JOIN, {"task": task, "tasks": tasks, "spark_task_id": spark_task_id, "entries": entries}
        )
        kind, everyone = conn.recv()
    finally:
        conn.close()
    if kind != Message.TOPOLOGY:
        raise ChannelError(f"the driver answered the address exchange with {kind!r}")
    return list(everyone)
