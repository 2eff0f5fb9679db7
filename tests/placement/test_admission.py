"""The driver's admission gate (`sparkrunner.placement.admission`): runs enter in order of arrival, each with
all its slots or none, and a large run first in line is not overtaken by smaller ones behind it."""

from __future__ import annotations

import queue
import threading

from sparkrunner.placement.admission import Admission, AdmissionGate
from tests.waiting import wait_until


def queue_up(gate: AdmissionGate, tasks: int, name: str, entered: queue.Queue[tuple[str, Admission]]) -> None:
    """Start a thread that waits at the gate; return once it is in line (so arrival order is the test's)."""
    waiting = gate.queued()
    threading.Thread(target=lambda: entered.put((name, gate.admit(tasks, name))), daemon=True).start()
    wait_until(lambda: gate.queued() > waiting, 10, f"run {name} queueing")


def test_runs_enter_in_order_of_arrival_with_all_their_slots() -> None:
    gate = AdmissionGate(lambda: 4)
    a, b = gate.admit(2, "a"), gate.admit(2, "b")  # the cluster's 4 slots are taken
    entered: queue.Queue[tuple[str, Admission]] = queue.Queue()
    queue_up(gate, 4, "big", entered)  # needs every slot
    queue_up(gate, 1, "small", entered)  # would fit as soon as one run ends, but came later
    a.release()  # one slot would do for small, but big is first in line
    b.release()
    name, big = entered.get(timeout=10)
    assert name == "big" and gate.queued() == 1
    big.release()
    assert entered.get(timeout=10)[0] == "small"
    assert list(gate.admitted) == ["a", "b", "big", "small"]


def test_a_run_alone_enters_even_beyond_the_known_slots() -> None:
    """As without the gate: Spark (and start_timeout) decide what happens to a run larger than the cluster."""
    gate = AdmissionGate(lambda: 1)
    gate.admit(3, "alone").release()
    assert list(gate.admitted) == ["alone"]
