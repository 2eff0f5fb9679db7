"""A `spark-submit` job: the driver is a submitted script, ranks run in the barrier stage of its session."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark

from tests.helpers import ROOT

JOB = """
import os
from pyspark.sql import SparkSession
from sparkrunner import Runner

spark = SparkSession.builder.appName("submitted").getOrCreate()

def main(scale):
    return [int(os.environ["RANK"]) * scale, int(os.environ["WORLD_SIZE"])]

print("RESULT", Runner(np=2).run(main, 10))
spark.stop()
"""


def test_runner_inside_a_spark_submit_job(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(JOB))
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
