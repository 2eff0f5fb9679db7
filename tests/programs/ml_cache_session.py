"""A second Spark application materializing the Spark ML pipeline of tests/data/driver/test_cache_ml_sessions.py.

Usage: ``ml_cache_session.py SOURCE CACHE``: prints "SAME <uri>" (the pipeline the test materialized in its own
application, fitted again here on the same Parquet files) and "OTHER <uri>" (StandardScaler's withMean flipped)."""

import sys

from sparkrunner.data import materialize
from tests.conftest import spark_session
from tests.data.driver.test_cache_ml_sessions import pipelined

SOURCE, CACHE = sys.argv[1], sys.argv[2]
spark = spark_session("local[1]")
print("SAME", materialize(pipelined(spark, SOURCE, with_mean=True), CACHE, progress=False).uri, flush=True)
print("OTHER", materialize(pipelined(spark, SOURCE, with_mean=False), CACHE, progress=False).uri, flush=True)
spark.stop()
