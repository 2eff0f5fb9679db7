"""A `spark-submit` job (tests/runner/test_spark_submit.py): a Runner in the submitted driver's session."""

import os

from pyspark.sql import SparkSession

from sparkrunner import Runner

spark = SparkSession.builder.appName("submitted").getOrCreate()


def main(scale: int) -> list[int]:
    return [int(os.environ["RANK"]) * scale, int(os.environ["WORLD_SIZE"])]


print("RESULT", Runner(np=2).run(main, 10))
spark.stop()
