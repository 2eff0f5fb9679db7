"""The run in Spark's UI: its barrier job's description names the run, and cancelling the job (its group with
`cancelJobGroup`, or the job as the UI's kill link does) stops the run like Ctrl-C.

Real local-cluster executors with the UI on: the description and the executors are read from Spark's REST API
(read-only), the MLflow status from the tracking store, the stop path from the sparkrunner log.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankFailedError, RunCancelledError
from tests.conftest import CLUSTER_MASTER, spark_session
from tests.matrix import LAUNCHERS
from tests.waiting import wait_until

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark_with_ui() -> Any:
    """The shared local-cluster session, with the UI (and so the REST API) on."""
    return spark_session(CLUSTER_MASTER, **{"spark.ui.enabled": "true"})


def rest(spark: Any, path: str) -> Any:
    """GET /api/v1/applications/<app id>/<path> from the driver's UI (read-only)."""
    port = spark.sparkContext.uiWebUrl.rsplit(":", 1)[1]
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/applications/{app}/{path}") as reply:
        return json.loads(reply.read())


def active_executors(spark: Any) -> list[str]:
    return sorted(e["id"] for e in rest(spark, "executors") if e["id"] != "driver" and e["isActive"])


def started_then_waits(folder: str) -> None:
    """Each rank says it started (a file named after it), then waits to be stopped."""
    import os

    Path(folder, f"rank{os.environ['RANK']}").touch()
    time.sleep(300)


def run_in_thread(runner: Runner, folder: Path) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            runner.run(started_then_waits, str(folder))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def cancel_group(spark: Any, job: dict[str, Any]) -> None:
    spark.sparkContext.cancelJobGroup(job["jobGroup"])


def cancel_job_as_the_ui_does(spark: Any, job: dict[str, Any]) -> None:
    # PySpark has no cancelJob: the UI's kill link calls SparkContext.cancelJob(id, "killed via the Web UI")
    spark.sparkContext._jsc.sc().cancelJob(job["jobId"], "killed via the Web UI")


@pytest.mark.parametrize(
    ("launcher", "cancel", "noticed"),
    [
        pytest.param("direct", cancel_group, "(cancelJobGroup)", id="direct-cancelJobGroup"),
        pytest.param(
            "mpirun", cancel_job_as_the_ui_does, "killed from Spark's UI", id="mpirun-cancelJob",
            marks=LAUNCHERS[1].marks,
        ),
    ],
)  # fmt: skip
def test_cancelling_the_job_stops_the_run_like_ctrl_c(
    spark_with_ui: Any,
    launcher: str,
    cancel: Any,
    noticed: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Spark placement (np=2, local-cluster[2,1,1024]); each launcher once and each way of cancelling once. The
    way of cancelling decides only the reason Spark gives the failed job (worded by
    `sparkrunner.placement.cancellation`), the launcher only how the ranks are stopped: the two do not meet, so
    the cells pair them up."""
    import mlflow

    caplog.set_level(logging.INFO, logger="sparkrunner")
    wait_until(lambda: len(active_executors(spark_with_ui)) == 2, 120, "both executors active")
    before = active_executors(spark_with_ui)
    runner = Runner(np=2, launcher=launcher, tracking=True, progress=False)
    thread, errors = run_in_thread(runner, tmp_path)
    wait_until(lambda: len(os.listdir(tmp_path)) == 2, 120, "every rank running")
    record = runner.last_run
    assert record is not None and record.spark_job_group is not None
    jobs = [j for j in rest(spark_with_ui, "jobs") if j.get("jobGroup") == record.spark_job_group]
    assert len(jobs) == 1 and jobs[0]["status"] == "RUNNING"
    expected = (
        f"sparkrunner: started_then_waits np=2 launcher={launcher} mlflow={record.mlflow_run_id} "
        f"run={record.run_id}"
    )
    assert jobs[0]["description"] == expected

    cancel(spark_with_ui, jobs[0])
    thread.join(120)
    assert not thread.is_alive()
    (error,) = errors
    assert isinstance(error, RunCancelledError) and not isinstance(error, RankFailedError), repr(error)
    assert f"Spark job {jobs[0]['jobId']} was cancelled" in str(error) and noticed in str(error)
    assert "leftover" not in caplog.text  # the ranks were stopped by the stop path, not the final sweep
    assert f"MLflow run {record.mlflow_run_id}" in caplog.text  # the run says where its MLflow run is
    assert mlflow.MlflowClient().get_run(str(record.mlflow_run_id)).info.status == "KILLED"
    # the executors are kept: a new two-task run gets both of the same executors
    assert Runner(np=2, launcher=launcher, tracking=False, progress=False).run(os.getpid) > 0
    assert active_executors(spark_with_ui) == before
