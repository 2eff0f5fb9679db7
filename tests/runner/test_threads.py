"""Runs started from worker threads (hyperparameter searches): the process's session is found, and two
concurrent runs share the `local[2]` cluster's slots. Launcher `direct`, Spark placement."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sparkrunner import Runner
from tests.waiting import wait_until


def meet(folder: str, me: str, other: str) -> str:
    """Leave a mark, then wait for the other run's mark: both ranks must be running at the same time."""
    Path(folder, me).touch()
    wait_until(
        lambda: os.path.exists(os.path.join(folder, other)), 120, f"run {other} never ran alongside run {me}"
    )
    return f"{me} met {other}"


def test_two_runs_from_two_threads_share_the_cluster(spark_local: Any, tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    def trial(me: str, other: str) -> tuple[object, str]:
        seen = SparkSession.getActiveSession()  # thread-local: None in a fresh thread
        return seen, Runner(np=1, launcher="direct", start_timeout=120).run(meet, str(tmp_path), me, other)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(trial, "a", "b")
        second = pool.submit(trial, "b", "a")
        results = [first.result(timeout=300), second.result(timeout=300)]
    assert [active for active, _ in results] == [None, None], "the threads must not see an active session"
    assert [value for _, value in results] == ["a met b", "b met a"]
