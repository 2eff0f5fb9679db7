"""Horovod through both launchers in a Spark barrier stage on local-cluster[2,1,1024] (two executor JVMs)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import RankFailedError, Runner
from tests.frameworks.horovod import hvd_functions
from tests.frameworks.horovod.test_horovod_local import assert_classic_training
from tests.helpers import rank_processes
from tests.matrix import LAUNCHERS

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_classic_horovod_training_in_a_barrier_stage(
    spark_cluster: Any, launcher: str, tmp_path: Path
) -> None:
    """The training, and its Horovod timeline from barrier task 0's rank, sent back to the driver."""
    checkpoints, timeline = tmp_path / "checkpoints", tmp_path / "timeline.json"
    checkpoints.mkdir()
    runner = Runner(
        np=2, spark=spark_cluster, launcher=launcher, timeout=300, env={"HOROVOD_TIMELINE": str(timeline)}
    )
    result = runner.run(hvd_functions.classic_train, str(checkpoints))
    assert_classic_training(result, checkpoints, 2)
    assert result["controller"] == ("mpi" if launcher == "mpirun" else "gloo")
    events = json.loads(Path(runner.received_files["rank 0/timeline.json"]).read_text())
    assert any("ALLREDUCE" in str(e.get("name", "")) for e in events)


def test_failing_rank_under_mpirun_raises_its_error(spark_cluster: Any) -> None:
    with pytest.raises(RankFailedError) as info:
        Runner(np=2, spark=spark_cluster, launcher="mpirun", timeout=300).run(hvd_functions.fail_on_rank_one)
    err = info.value
    assert (err.rank, err.exc_type) == (1, "ValueError")
    assert "fail_on_rank_one" in err.remote_traceback
    run_id = re.search(r"run (\w+)", err.exc_message).group(1)  # type: ignore[union-attr]
    assert rank_processes(run_id) == {}  # mpirun, its daemon and every rank are gone
