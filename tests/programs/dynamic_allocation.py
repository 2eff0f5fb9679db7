"""A driver whose session has dynamic allocation on, which barrier mode refuses (test_spark_runner.py)."""

from pyspark.sql import SparkSession

from sparkrunner import Runner
from sparkrunner.errors import BarrierModeUnsupportedError

spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.dynamicAllocation.enabled", "true")
    .getOrCreate()
)
try:
    Runner(np=2).run(print)
except BarrierModeUnsupportedError as exc:
    print("REFUSED:", exc)
