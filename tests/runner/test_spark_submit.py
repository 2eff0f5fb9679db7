"""A `spark-submit` job: the driver is a submitted script, ranks run in the barrier stage of its session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from tests.helpers import ROOT, driver

pytestmark = pytest.mark.spark  # spark-submit starts a Spark driver


def test_runner_inside_a_spark_submit_job(tmp_path: Path) -> None:
    job = driver("submitted_job")
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(job)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT [0, 2]" in done.stdout
