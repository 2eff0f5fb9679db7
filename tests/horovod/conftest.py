"""Horovod tests: skipped as a folder when Horovod is not installed (scripts/setup.sh builds it)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

if importlib.util.find_spec("horovod") is None:
    collect_ignore_glob = ["test_*.py"]  # pragma: no cover - depends on the environment


def pytest_report_header() -> str | None:
    if importlib.util.find_spec("horovod") is None:
        return "tests/horovod skipped: Horovod is not installed (run scripts/setup.sh, which builds it)"
    return None


@pytest.fixture(scope="module")
def cluster_spark() -> Iterator[Any]:
    """One local-cluster[2,1,1024] SparkSession per module: two real executor JVMs on this machine."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("sparkrunner-horovod-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "768m")
        .getOrCreate()
    )
    yield spark
    spark.stop()
