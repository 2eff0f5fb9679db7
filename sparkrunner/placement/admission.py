"""Driver-side admission of barrier stages: first come, first served, all of a run's slots or none.

Spark launches a barrier stage's tasks all together, but runs of one driver that wait in Spark's queue (trials
from a thread pool) would spend their `start_timeout` there, and Spark promises no order among them. The gate
queues the runs of one SparkContext in order of arrival: the run first in line is admitted once the cluster's
slots, less those held by admitted runs, fit all its tasks; it holds them until its placement stops (a warm
session, until its ranks stop). A run alone is admitted at once, whatever the slots, as without the gate.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from sparkrunner.placement.slots import task_slots
from sparkrunner.timeouts import SLOTS_POLL_S

log = logging.getLogger(__name__)


class AdmissionGate:
    """Admits runs in order of arrival, each when all its slots are free (`capacity()`: the cluster's slots)."""

    def __init__(self, capacity: Callable[[], int]) -> None:
        self._capacity = capacity
        self._changed = threading.Condition()
        self._line: deque[int] = deque()
        self._tickets = itertools.count()
        self._held = 0
        self.admitted: deque[str] = deque(maxlen=256)
        """The names of the latest admitted runs, in the order admitted."""

    def queued(self) -> int:
        """How many runs wait now."""
        with self._changed:
            return len(self._line)

    def admit(self, tasks: int, name: str) -> Admission:
        """Block until the run `name` of `tasks` tasks is first in line and its slots are free; Ctrl-C leaves."""
        with self._changed:
            ticket = next(self._tickets)
            self._line.append(ticket)
            try:
                if not self._may_enter(ticket, tasks):
                    log.info(
                        "run %s waits for %d free task slot(s), behind %d run(s)",
                        name,
                        tasks,
                        ticket - self._line[0],
                    )
                while not self._may_enter(ticket, tasks):
                    self._changed.wait(SLOTS_POLL_S)  # slots also come back without a notify (new executors)
            except BaseException:
                self._line.remove(ticket)
                self._changed.notify_all()
                raise
            self._line.popleft()
            self._held += tasks
            self.admitted.append(name)
            self._changed.notify_all()
        return Admission(self, tasks)

    def _may_enter(self, ticket: int, tasks: int) -> bool:
        if self._line[0] != ticket:
            return False
        return self._held == 0 or self._held + tasks <= self._capacity()

    def release(self, tasks: int) -> None:
        with self._changed:
            self._held -= tasks
            self._changed.notify_all()


class Admission:
    """One admitted run's slots; `release()` gives them back (once)."""

    def __init__(self, gate: AdmissionGate, tasks: int) -> None:
        self._gate = gate
        self._tasks = tasks

    def release(self) -> None:
        tasks, self._tasks = self._tasks, 0
        if tasks:
            self._gate.release(tasks)


_gates: dict[str, AdmissionGate] = {}
_gates_lock = threading.Lock()


def gate_for(sc: Any) -> AdmissionGate:
    """The gate of the SparkContext `sc` (one per Spark application)."""
    with _gates_lock:
        key = str(sc.applicationId)
        if key not in _gates:
            _gates[key] = AdmissionGate(lambda: task_slots(sc))
        return _gates[key]
