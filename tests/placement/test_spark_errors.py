"""What the user reads when a barrier stage fails: real Spark 3.5 and 4.x error texts (recorded by
tests/programs/record_spark_errors.py) and the run-failure classification, table-driven."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkrunner.driver.failure_causes import _CONSEQUENTIAL
from sparkrunner.placement.background_job import _EXECUTOR_LOST, _lost_executor_advice, short_spark_error

RECORDED = Path(__file__).with_name("spark_errors")


class Py4JLike(Exception):
    """Stands for py4j's Py4JJavaError: only its str() is read."""


@pytest.mark.parametrize("path", sorted(RECORDED.glob("spark-*-python-error.txt")), ids=lambda p: p.stem)
def test_a_tasks_python_error_is_shown_as_its_own_last_line(path: Path) -> None:
    text = path.read_text()
    assert (
        "Job aborted due to stage failure" in text
    )  # the recording is the whole py4j text, JVM stack included
    assert short_spark_error(Py4JLike(text)) == "ValueError: bad batch in barrier task"


def test_both_spark_versions_are_recorded() -> None:
    versions = {p.name.split("-")[1][:1] for p in RECORDED.glob("spark-*-python-error.txt")}
    assert versions == {"3", "4"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "ModuleNotFoundError: No module named 'sparkrunner'",
            "the executors' Python cannot import sparkrunner",
        ),
        (
            "An error occurred while calling o1.collect.\n: org.apache.spark.SparkException: Job aborted due to "
            "stage failure: Task 0 failed\n\tat org.apache.spark.X(X.scala:1)",
            "Job aborted due to stage failure: Task 0 failed",
        ),
        (
            "org.apache.spark.SparkException: Job aborted: ExecutorLostFailure (executor 1 exited caused by one "
            "of the running tasks) Reason: Command exited with code 137\n\tat x",
            "Spark executor 1, which ran a barrier task of this run, was lost: its JVM was killed with SIGKILL",
        ),
        (
            "org.apache.spark.SparkException: ExecutorLostFailure (executor 3 exited unrelated to the running "
            "tasks) Reason: Command exited with code 1",
            "Spark executor 3, which ran a barrier task of this run, was lost (exit code 1)",
        ),
    ],
    ids=["not-installed", "jvm-only", "executor-sigkill", "executor-exit-1"],
)
def test_short_spark_error(text: str, expected: str) -> None:
    assert short_spark_error(Py4JLike(text)).startswith(expected)


@pytest.mark.parametrize(
    ("reason", "advice"),
    [
        (
            "ExecutorLostFailure (executor 2 exited) Reason: Command exited with code 137",
            "SIGKILL (exit code 137)",
        ),
        (
            "ExecutorLostFailure (executor 2 exited) Reason: Command exited with code 143",
            "was lost (exit code 143)",
        ),
        ("ExecutorLostFailure (executor 2 exited caused by one of the running tasks)", "was lost"),
    ],
)
def test_lost_executor_advice_names_the_executor_and_reads_its_exit_code(reason: str, advice: str) -> None:
    lost = _EXECUTOR_LOST.search(reason)
    assert lost is not None
    text = _lost_executor_advice(lost)
    assert (
        text.startswith("Spark executor 2, which ran a barrier task of this run, was lost") and advice in text
    )


@pytest.mark.parametrize(
    ("message", "consequential"),
    [
        ("RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:29587", True),  # Gloo, recorded
        ("RuntimeError: Connection reset by peer", True),
        ("BrokenPipeError: [Errno 32] Broken pipe", True),
        ("RuntimeError: NCCL communicator was aborted on rank 0", True),
        ("HorovodInternalError: Horovod has been shut down", True),
        ("RuntimeError: Socket Timeout", True),
        ("DistBackendError: peer 1 lost connection", True),
        ("ValueError: bad batch on rank 1", False),
        ("RankProcessDied: its process ended without reporting a result: exit code 7", False),
        ("torch.OutOfMemoryError: CUDA out of memory", False),
    ],
)
def test_which_rank_errors_are_the_consequence_of_a_peers_failure(message: str, consequential: bool) -> None:
    assert bool(_CONSEQUENTIAL.search(message)) is consequential
