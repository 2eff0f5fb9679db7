"""Writing a DataFrame as Parquet to a local path: sparkrunner's writer (pyarrow inside the Spark tasks, which
needs no Hadoop connector for object stores) against Spark's own Parquet writer, on the same DataFrame.

    .venv/bin/python bench/materialize.py [--rows 2000000] [--repeats 3] [--master local[2]]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.spark_session import quiet_session

FEATURES = 16


def frame(spark: Any, rows: int) -> Any:
    """`features` (16 floats from the row id, as an ML pipeline would give) and a `label`."""
    from pyspark.sql import functions as F

    features = F.array(*[(F.col("id") * (i + 1) % 97).cast("float") for i in range(FEATURES)])
    return spark.range(rows, numPartitions=8).select(
        features.alias("features"), (F.col("id") % 10).alias("label")
    )


def session(master: str) -> Any:
    """The materialize benchmarks' SparkSession on `master` (no UI: nothing here reads it)."""
    return quiet_session(master, **{"spark.ui.enabled": "false"})


def sparkrunner_writer(df: Any, target: Path) -> None:
    from sparkrunner.common import storage
    from sparkrunner.data.driver.write_progress import WriteProgress
    from sparkrunner.data.driver.writer import WriteOptions, write

    progress = WriteProgress(df.sparkSession.sparkContext, str(target), enabled=False)
    write(df, storage.resolve(target), {}, WriteOptions(32 * 2**20, 1_000_000), progress)


def spark_writer(df: Any, target: Path) -> None:
    df.write.option("parquet.block.size", 32 * 2**20).option("maxRecordsPerFile", 1_000_000).parquet(
        f"file://{target}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    spark = session(args.master)
    df = frame(spark, args.rows)
    writers: dict[str, Callable[[Any, Path], None]] = {
        "sparkrunner (pyarrow in tasks)": sparkrunner_writer,
        "Spark DataFrameWriter.parquet": spark_writer,
    }
    best = dict.fromkeys(writers, float("inf"))
    workdir = Path(tempfile.mkdtemp(prefix="sparkrunner-bench-write-"))
    try:
        for _ in range(args.repeats):  # taking turns, so that load from other work hits both alike
            for name, writer in writers.items():
                target = workdir / uuid.uuid4().hex
                start = time.perf_counter()
                writer(df, target)
                best[name] = min(best[name], time.perf_counter() - start)
                shutil.rmtree(target)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        spark.stop()
    print(
        f"\nwriting {args.rows:,} rows ({FEATURES} float32 + 1 long each) to a local path, {args.master}, best of {args.repeats}"
    )
    for name, seconds in best.items():
        print(f"  {name:34s} {seconds:6.2f} s  {args.rows / seconds:>12,.0f} rows/s")
    ratio = best["Spark DataFrameWriter.parquet"] / best["sparkrunner (pyarrow in tasks)"]
    print(f"\n  sparkrunner writer speed / Spark's writer  {ratio:5.2f}x")


if __name__ == "__main__":
    main()
