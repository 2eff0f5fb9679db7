"""How a cancelled Spark job is told apart from a failed one: Spark's own texts (recorded from Spark 4.3's
collect() error, first line; Spark 3.5 has the same without the error class) mapped to how it was cancelled."""

from __future__ import annotations

import pytest

from sparkrunner.observe.tracking import where_is_run
from sparkrunner.placement.cancellation import spark_cancellation

_PY4J = "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n: "
_STACK = "\n\tat org.apache.spark.errors.SparkCoreErrors$.sparkJobCancelled(SparkCoreErrors.scala:222)"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (
            "Job 0 cancelled part of cancelled job group sparkrunner-0123456789ab",
            "Spark job 0 was cancelled: its job group sparkrunner-0123456789ab was cancelled (cancelJobGroup)",
        ),
        ("Job 1 cancelled ", "Spark job 1 was cancelled: it was cancelled by its id (cancelJob)"),
        ("Job 1 cancelled killed via the Web UI", "Spark job 1 was cancelled: it was killed from Spark's UI"),
        (
            "Job 2 cancelled part of cancelled job tag sparkrunner-ab",
            "Spark job 2 was cancelled: its job tag sparkrunner-ab was cancelled (interruptTag)",
        ),
        (
            "Job 3 cancelled because Stage 7 was cancelled",
            "Spark job 3 was cancelled: its stage 7 was cancelled",
        ),
        (
            "Job 4 cancelled as part of cancellation of all jobs",
            "Spark job 4 was cancelled: every job of the application was cancelled (cancelAllJobs)",
        ),
        (
            "Job 5 cancelled by the operator",
            "Spark job 5 was cancelled: it was cancelled by its id (cancelJob: by the operator)",
        ),
    ],
    ids=["cancelJobGroup", "cancelJob", "ui-kill-link", "interruptTag", "stage", "cancelAllJobs", "reason"],
)
@pytest.mark.parametrize("error_class", ["[SPARK_JOB_CANCELLED] ", ""], ids=["spark-4", "spark-3"])
def test_spark_cancel_texts(reason: str, expected: str, error_class: str) -> None:
    sqlstate = " SQLSTATE: XXKDA" if error_class else ""
    text = f"{_PY4J}org.apache.spark.SparkException: {error_class}{reason}{sqlstate}{_STACK}"
    assert spark_cancellation(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "org.apache.spark.SparkException: Job 0 cancelled because SparkContext was shut down",
        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed",
        "ValueError: bad batch in barrier task",
    ],
    ids=["context-shut-down", "stage-failure", "python-error"],
)
def test_failures_are_not_cancels(text: str) -> None:
    assert spark_cancellation(text) is None


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("http://mlflow:5000/", "http://mlflow:5000/#/experiments/3/runs/abc"),
        ("sqlite:////tmp/m.db", "tracking URI sqlite:////tmp/m.db (to see it: mlflow ui --backend-store-uri"),
        ("databricks", "experiment 3 in the workspace of databricks"),
    ],
    ids=["server", "local-store", "databricks"],
)
def test_where_is_an_mlflow_run(uri: str, expected: str) -> None:
    assert where_is_run(uri, "3", "abc").startswith(expected)
