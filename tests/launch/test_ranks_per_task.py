"""Several ranks per Spark task: `Runner(np=4, ranks_per_task=2)` is 2 barrier tasks x 2 ranks forming one
4-rank world, on a real `local-cluster[2,1,1024]` (two executors, one slot each); launchers `direct`, `mpirun`."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.tasks.barrier_task import split_gpus
from tests.helpers import leftover_rank_processes, run_driver
from tests.matrix import LAUNCHERS


def rank_view() -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([int(os.environ["RANK"])])
    dist.all_reduce(total)
    dist.destroy_process_group()
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")
    view = {k: int(os.environ[k]) for k in keys}
    return {**view, "sum": int(total.item()), "parent": os.getppid(), "returned_at": time.time()}


@pytest.mark.spark
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_tasks_of_two_ranks_form_one_world(spark_cluster: Any, launcher: str) -> None:
    views = Runner(np=4, ranks_per_task=2, launcher=launcher).run_all(rank_view)
    run_ended_at = time.time()  # the test's own clock, on the one machine that holds driver and ranks
    # how long the run outlived its ranks' last return: issue 18 item 3 bounds it
    outlived_ranks_s = run_ended_at - max(v["returned_at"] for v in views)
    assert outlived_ranks_s >= 0
    assert [v["RANK"] for v in views] == [0, 1, 2, 3]
    assert all(v["WORLD_SIZE"] == 4 and v["sum"] == 6 for v in views), views
    # both executors are on this one machine: it holds all 4 ranks
    assert sorted(v["LOCAL_RANK"] for v in views) == [0, 1, 2, 3]
    assert {v["LOCAL_WORLD_SIZE"] for v in views} == {4} and {v["NODE_RANK"] for v in views} == {0}
    if launcher == "direct":  # each task's Python worker is the parent of its own two ranks
        assert views[0]["parent"] == views[1]["parent"] != views[2]["parent"] == views[3]["parent"]


def test_task_gpus_are_split_one_per_rank() -> None:
    assert split_gpus(("0", "1", "2", "3"), 4) == [("0",), ("1",), ("2",), ("3",)]
    assert split_gpus(("0", "1", "2", "3"), 2) == [("0", "1"), ("2", "3")]
    assert split_gpus((), 2) == [(), ()]
    assert split_gpus(("0", "1", "2"), 2) == [("0", "1", "2")] * 2, "uneven: every rank sees the task's GPUs"


@pytest.mark.parametrize(
    ("np", "per_task", "message"),
    [(4, 3, "not a multiple of ranks_per_task=3"), (-2, 2, "applies to Spark runs"), (4, 0, "int >= 1")],
)
def test_bad_ranks_per_task_is_refused(np: int, per_task: int, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        Runner(np=np, ranks_per_task=per_task)


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
