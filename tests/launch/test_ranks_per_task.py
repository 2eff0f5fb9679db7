"""Several ranks per Spark task: `Runner(np=4, ranks_per_task=2)` is 2 barrier tasks x 2 ranks forming one
4-rank world, on a real `local-cluster[2,1,1024]` (two executors, one slot each); launchers `direct`, `mpirun`."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import InvalidArgumentError
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
    # how long the run outlived its ranks' last return
    outlived_ranks_s = run_ended_at - max(v["returned_at"] for v in views)
    assert outlived_ranks_s >= 0
    assert [v["RANK"] for v in views] == [0, 1, 2, 3]
    assert all(v["WORLD_SIZE"] == 4 and v["sum"] == 6 for v in views), views
    # both executors are on this one machine: it holds all 4 ranks
    assert sorted(v["LOCAL_RANK"] for v in views) == [0, 1, 2, 3]
    assert {v["LOCAL_WORLD_SIZE"] for v in views} == {4} and {v["NODE_RANK"] for v in views} == {0}
    if launcher == "direct":  # each task's Python worker is the parent of its own two ranks
        assert views[0]["parent"] == views[1]["parent"] != views[2]["parent"] == views[3]["parent"]


@pytest.mark.parametrize(
    ("np", "per_task", "message"),
    [(4, 3, "not a multiple of ranks_per_task=3"), (-2, 2, "applies to Spark runs"), (4, 0, "int >= 1")],
)
def test_bad_ranks_per_task_is_refused(np: int, per_task: int, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        Runner(np=np, ranks_per_task=per_task)
