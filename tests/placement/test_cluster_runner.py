"""np > 0 on `local-cluster[2,1,1024]`: two real executor JVMs; ranks live in them and train together."""

from __future__ import annotations

import os
from typing import Any

from sparkrunner import Runner
from tests.runner.training import assert_trained_in_lockstep, ddp_train


def where_am_i() -> dict[str, Any]:
    return {"pid": os.getpid(), "ppid": os.getppid(), "rank": os.environ["RANK"]}


def test_ranks_run_inside_executor_tasks(spark_cluster: Any, launcher: str) -> None:
    info = Runner(np=2, launcher=launcher).run(where_am_i)
    assert info["rank"] == "0"
    assert info["ppid"] != os.getpid(), "rank 0 must be spawned by an executor task, not the driver"


def test_ddp_gloo_training_across_executors(spark_cluster: Any, launcher: str) -> None:
    assert_trained_in_lockstep(Runner(np=2, launcher=launcher).run(ddp_train), world=2)
