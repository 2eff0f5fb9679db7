"""Records the text of a real barrier-stage failure (a task's Python error) for tests/placement/spark_errors/.

Run it in each Spark environment: `python -m tests.programs.record_spark_errors tests/placement/spark_errors`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import SparkSession


def raises(_: Iterable[int]) -> Iterable[int]:
    raise ValueError("bad batch in barrier task")


def main(folder: Path) -> None:
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .config("spark.task.maxFailures", "1")
        .getOrCreate()
    )
    try:
        spark.sparkContext.parallelize(range(2), 2).barrier().mapPartitions(raises).collect()
    except Exception as exc:
        (folder / f"spark-{spark.version}-python-error.txt").write_text(str(exc))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
