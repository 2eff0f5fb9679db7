"""materialize() over Spark Connect and a Connect run reading the result (test_connect_materialize.py).

Usage: ``connect_materialize.py URL TMP ROWS`` (URL: the Connect server's); also `stream` of a Connect DataFrame."""

import json
import os
import sys
from pathlib import Path
from typing import Any, cast

from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from pyspark.sql.connect import functions as F
from pyspark.sql.connect.session import SparkSession as ConnectSession

from sparkrunner import Runner
from sparkrunner.data import materialize, stream
from sparkrunner.data.dataset import MANIFEST
from sparkrunner.data.driver.cache_key import cache_description
from sparkrunner.errors import NotEnoughSlotsError

URL, TMP, ROWS = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
# (built through pyspark.sql's builder, as users write it: it switches pyspark into Connect mode)
spark = cast(ConnectSession, SparkSession.builder.remote(URL).getOrCreate())
other = cast(ConnectSession, SparkSession.builder.remote(URL).create())  # a second client session
print("SESSIONS", spark.session_id != other.session_id, flush=True)
source = str(TMP / "source")
spark.range(0, ROWS, 1, 4).selectExpr("id", "CAST(id % 7 AS DOUBLE) AS x").write.parquet(source)


def query(session):
    return session.read.parquet(source).filter("id >= 0").select("id", (F.col("x") * 2).alias("x"))


cache = TMP / "cache"
first = materialize(query(spark), cache, max_rows_per_file=300)
print("WRITTEN", first.num_rows, first.column_names, flush=True)
print("URI", first.uri, flush=True)
stamp = os.stat(Path(first.uri) / MANIFEST).st_mtime_ns
again = materialize(query(other), cache, max_rows_per_file=300)
print("REUSED", again.uri == first.uri, os.stat(Path(again.uri) / MANIFEST).st_mtime_ns == stamp, flush=True)

OPTIONS = {"row_group_bytes": 1, "max_rows_per_file": 1}


def keyed_to_session(frame):
    return "session" in cache_description(frame, OPTIONS)


plus_one: Any = F.udf(lambda v: v + 1.0, "double")  # a Column factory; pyspark's stubs say a union
with_udf = query(spark).select("id", plus_one("x").alias("x"))
print("FILES", keyed_to_session(query(spark)), flush=True)
print(
    "UDF",
    keyed_to_session(with_udf),
    cache_description(with_udf, OPTIONS) == cache_description(with_udf, OPTIONS),
    cache_description(with_udf, OPTIONS)
    != cache_description(query(other).select("id", plus_one("x").alias("x")), OPTIONS),
    flush=True,
)
print(
    "RAND",
    keyed_to_session(query(spark).withColumn("r", F.rand(3))),
    keyed_to_session(query(spark).filter("rand(3) < 0.5")),
    flush=True,
)
local = spark.createDataFrame([(1, 2.0)], "id long, x double")
print("LOCAL", keyed_to_session(local), flush=True)
spark.range(3).createOrReplaceGlobalTempView("three")  # in the server's catalog
print(
    "TABLE",
    keyed_to_session(spark.table("global_temp.three")),
    keyed_to_session(spark.sql("SELECT 1 AS a")),
    flush=True,
)
print(
    "BUILTIN",
    keyed_to_session(query(spark).select(F.abs("x").alias("x"), F.upper(F.col("id").cast("string")))),
    flush=True,
)

a = materialize(spark.createDataFrame([(1, 2.0)], "k long, v double"), cache, progress=False)
b = materialize(other.createDataFrame([(1, 2.0)], "k long, v double"), cache, progress=False)
print("LOCAL DATA", a.uri != b.uri, flush=True)
vectors = spark.createDataFrame(
    [(Vectors.dense([float(i), 0.5]), i) for i in range(4)], ["features", "label"]
)
print(
    "VECTORS",
    sorted((c.name, c.dtype, c.shape) for c in materialize(vectors, cache, progress=False).columns),
    flush=True,
)


def read_shard(data):
    from sparkrunner.data import NumpyLoader

    return [int(i) for batch in NumpyLoader(data, 10, seed=1) for i in batch["id"]]


for launcher in ("direct", "mpirun"):
    shards = Runner(np=2, spark=spark, launcher=launcher).run_all(read_shard, first)
    print("SHARDS", launcher, json.dumps(shards), flush=True)


streamed = stream(query(spark), seed=3)  # feeders on the server's 2 slots, ranks beside this driver (np<0)
print("STREAM", json.dumps(Runner(np=-2, launcher="direct").run_all(read_shard, streamed)), flush=True)
try:
    Runner(np=2, spark=spark, launcher="direct").run(read_shard, streamed)
except NotEnoughSlotsError as exc:
    print("STREAM REFUSED", "spark.task.cpus" in str(exc), flush=True)
