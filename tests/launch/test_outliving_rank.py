"""Rank 0 often works on after its peers returned (saving a model, logging): the run must wait for it.

On `local-cluster` both executors share one process table, so a task whose rank ended early must not clean up
the ranks of a task that is still running.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from sparkrunner import Runner
from tests.helpers import rank_processes
from tests.matrix import Placement

OUTLIVE_S = 10.0


def rank_zero_outlives_its_peers(seconds: float) -> dict[str, Any]:
    """All ranks meet in a torch.distributed barrier (so every rank is surely running), then every rank but 0
    returns at once and rank 0 returns `seconds` later."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()
    if os.environ["RANK"] != "0":
        return {}
    started = time.monotonic()
    time.sleep(seconds)
    return {"rank": "0", "slept": time.monotonic() - started, "run_id": os.environ["SPARKRUNNER_RUN_ID"]}


def assert_rank_zero_outlived(runner: Runner) -> None:
    result = runner.run(rank_zero_outlives_its_peers, OUTLIVE_S)
    assert result["rank"] == "0"
    assert result["slept"] >= OUTLIVE_S
    assert rank_processes(result["run_id"]) == {}


@pytest.mark.slow
def test_rank_zero_outlives_its_peers(placement: Placement, launcher: str) -> None:
    assert_rank_zero_outlived(
        Runner(np=placement.np(2), spark=placement.spark, launcher=launcher, timeout=120)
    )
