"""Elastic world size on real Spark (local-cluster[2,2,1024]: two executor JVMs of 2 slots each), launcher
direct: `Runner(np=(2, 4))` starts 4 ranks; the test kills one executor JVM and holds its replacement back
(SIGSTOP before it registers), so the next attempt runs at 2; when the replacement is let go the run grows
back to 4 at its next checkpoint (`stop_reason == "rescale"`). Oracles: each epoch trains on every row
exactly once (counted by the ranks with an all-reduce), and the loss curve matches an uninterrupted run's.

One launcher: what is elastic here (the driver's choice of size per attempt and its "rescale" stop, sent to
the ranks over the attempt channel: `sparkrunner.driver.elastic`) takes no launcher. What mpirun does
differently in such a run is tested on mpirun elsewhere: a retried attempt resuming from a checkpoint
(tests/recovery/test_resume_spark.py), a killed executor JVM and a stop sent over the channel at a timeout
(tests/scenarios/faults/test_fault_matrix.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.data import ParquetData
from sparkrunner.placement.slots import task_slots
from tests.conftest import spark_session
from tests.helpers import driver_url
from tests.recovery.elastic_scenario import (
    ExecutorHolder,
    assert_grew_back,
    elastic_fit,
    make_data,
    uninterrupted_run,
)
from tests.waiting import wait_until

# three attempts (4, 2, 4 ranks): ~4 min at a load average of ~50 on 2 cores
pytestmark = pytest.mark.timeout(900)

MASTER = "local-cluster[2,2,1024]"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> ParquetData:
    return make_data(tmp_path_factory.mktemp("elastic") / "data")


@pytest.fixture(scope="module")
def uninterrupted(data: ParquetData) -> dict[str, Any]:
    return uninterrupted_run(data)


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session(MASTER)


def four_slots(spark: Any) -> None:
    wait_until(lambda: task_slots(spark.sparkContext) >= 4, 180, "4 task slots")


def test_shrinks_on_a_lost_executor_and_grows_back_at_a_checkpoint(
    spark: Any, data: ParquetData, uninterrupted: dict[str, Any], tmp_path: Path
) -> None:
    """Placement: Spark barrier stages of 4, then 2, then 4 tasks; launcher direct."""
    four_slots(spark)
    runner = Runner(
        np=(2, 4), launcher="direct", max_failures=1, checkpoint_dir=str(tmp_path / "checkpoints"),
        start_timeout=180, timeout=480, stop_grace_s=20, tracking=False, progress=False,
    )  # fmt: skip
    holder = ExecutorHolder(tmp_path, driver_url(spark))
    try:
        result = runner.run(elastic_fit, data, str(tmp_path))
    finally:
        holder.join()
        four_slots(spark)  # leave the shared session whole
    assert holder.killed_at is not None and holder.held is not None, "no executor was killed and held back"
    assert_grew_back(runner, result, uninterrupted)
