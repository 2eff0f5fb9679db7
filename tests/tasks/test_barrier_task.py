"""The barrier task's body (`sparkrunner/tasks/barrier_task.py`): every launcher has a task side, how a task's
GPUs are split among its ranks, and which barrier task a rank belongs to when a task holds several (its clean-up
and the failure's words)."""

from __future__ import annotations

import pytest

from sparkrunner.driver.launcher_choice import LAUNCHERS
from sparkrunner.tasks.barrier_task import split_gpus
from sparkrunner.tasks.launchers import TASK_SIDES
from tests.helpers import leftover_rank_processes, run_driver


def test_every_launcher_a_run_can_get_has_a_side_in_the_barrier_task() -> None:
    """The task looks its launcher's side up by name: one missing would fail only inside a Spark task."""
    assert set(TASK_SIDES) == set(LAUNCHERS) == {"direct", "mpirun"}


def test_task_gpus_are_split_one_per_rank() -> None:
    assert split_gpus(("0", "1", "2", "3"), 4) == [("0",), ("1",), ("2",), ("3",)]
    assert split_gpus(("0", "1", "2", "3"), 2) == [("0", "1"), ("2", "3")]
    assert split_gpus((), 2) == [(), ()]
    assert split_gpus(("0", "1", "2"), 2) == [("0", "1", "2")] * 2, "uneven: every rank sees the task's GPUs"


@pytest.mark.spark
def test_started_by_task_is_the_barrier_task_not_its_first_rank() -> None:
    """Placement: Spark `local[3]` in its own driver process, np=6, ranks_per_task=2, launcher direct: barrier
    task 2 holds ranks 4-5 and task 1 holds ranks 2-3, so a task index and a first rank can be the same number.
    Task 2's clean-up must leave task 1's ranks alone, and a dead rank 3 is reported in barrier task 1."""
    out = run_driver("three_tasks", seconds=400)
    assert "ALL [(0, '0'), (1, '0'), (2, '1'), (3, '1'), (4, '2'), (5, '2')]" in out, out
    failed = next(line for line in out.splitlines() if line.startswith("FAILED"))
    assert failed.startswith("FAILED 3 | barrier task 1, host "), failed
    assert "barrier task 2" not in failed and "barrier task 3" not in failed, failed
    assert "exit code 7" in failed, failed
    assert leftover_rank_processes(grace_s=10) == {}
