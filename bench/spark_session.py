"""The one SparkSession builder of the benchmarks: quiet (no console progress, errors only) and its executors
running this interpreter, so that they import the same sparkrunner and pyarrow as the driver."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any


def checkout_on_pythonpath() -> None:
    """Put this checkout first on PYTHONPATH, before a SparkSession starts: Spark's Python workers (which inherit
    it) then import the bench's own modules and this checkout's sparkrunner."""
    root = Path(__file__).resolve().parent.parent
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))


def quiet_session(master: str, **conf: str) -> Any:
    """A SparkSession on `master` with the Spark settings `conf` (e.g. ``{"spark.executor.memory": "768m"}``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).config("spark.ui.showConsoleProgress", "false")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


DISCOVERY = """#!/bin/sh
# Spark GPU discovery: every GPU nvidia-smi lists, by index
ids=$(nvidia-smi --query-gpu=index --format=csv,noheader | sed 's/.*/"&"/' | paste -sd, -)
echo "{\\"name\\": \\"gpu\\", \\"addresses\\": [$ids]}"
"""


def gpu_conf(folder: str, gpus: int, tasks_per_gpu: int = 1) -> dict[str, str]:
    """Spark settings for GPU scheduling on a local-cluster master: each executor owns `gpus` GPUs (found by an
    nvidia-smi discovery script written to `folder`) and `tasks_per_gpu` tasks share each one."""
    script = os.path.join(folder, "discover_gpus.sh")
    with open(script, "w") as f:
        f.write(DISCOVERY)
    os.chmod(script, os.stat(script).st_mode | stat.S_IEXEC)
    return {
        "spark.worker.resource.gpu.amount": str(gpus),
        "spark.worker.resource.gpu.discoveryScript": script,
        "spark.executor.resource.gpu.amount": str(gpus),
        "spark.executor.resource.gpu.discoveryScript": script,
        "spark.task.resource.gpu.amount": str(1 / tasks_per_gpu),
    }
