"""materialize on Spark Connect DataFrames, against a real local Connect server: the tasks write Parquet with
pyarrow (the client has no SparkContext), the cache is reused across sessions only for data named by files,
and a Spark Connect run (np=2, launchers `direct` and `mpirun`) reads disjoint shards that cover every row.

The driver runs in its own process (the Connect server must not share the pytest process with the classic
session of the other tests).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers import leftover_rank_processes, run_driver

pytestmark = pytest.mark.spark

ROWS = 1000

DRIVER = """
import json, os, sys
from pathlib import Path
from pyspark.ml.linalg import Vectors
from pyspark.sql.connect import functions as F
from pyspark.sql.connect.session import SparkSession as ConnectSession
from sparkrunner import Runner
from sparkrunner.data import materialize
from sparkrunner.data.cache_key import cache_description
from sparkrunner.data.dataset import MANIFEST
from tests.connect.server import start_connect_session

TMP = Path(sys.argv[1])
server, spark = start_connect_session()
port = server.conf.get("spark.connect.grpc.binding.port")
other = ConnectSession.builder.remote(f"sc://localhost:{port}").create()  # a second client session
print("SESSIONS", spark.session_id != other.session_id, flush=True)
source = str(TMP / "source")
server.range(0, ROWS, 1, 4).selectExpr("id", "CAST(id % 7 AS DOUBLE) AS x").write.parquet(source)

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

plus_one = F.udf(lambda v: v + 1.0, "double")
with_udf = query(spark).select("id", plus_one("x").alias("x"))
print("FILES", keyed_to_session(query(spark)), flush=True)
print("UDF", keyed_to_session(with_udf), cache_description(with_udf, OPTIONS) == cache_description(with_udf, OPTIONS),
      cache_description(with_udf, OPTIONS) != cache_description(query(other).select("id", plus_one("x").alias("x")), OPTIONS),
      flush=True)
print("RAND", keyed_to_session(query(spark).withColumn("r", F.rand(3))),
      keyed_to_session(query(spark).filter("rand(3) < 0.5")), flush=True)
local = spark.createDataFrame([(1, 2.0)], "id long, x double")
print("LOCAL", keyed_to_session(local), flush=True)
server.range(3).createOrReplaceGlobalTempView("three")
print("TABLE", keyed_to_session(spark.table("global_temp.three")), keyed_to_session(spark.sql("SELECT 1 AS a")), flush=True)
print("BUILTIN", keyed_to_session(query(spark).select(F.abs("x").alias("x"), F.upper(F.col("id").cast("string")))),
      flush=True)

a = materialize(spark.createDataFrame([(1, 2.0)], "k long, v double"), cache, progress=False)
b = materialize(other.createDataFrame([(1, 2.0)], "k long, v double"), cache, progress=False)
print("LOCAL DATA", a.uri != b.uri, flush=True)
vectors = spark.createDataFrame([(Vectors.dense([float(i), 0.5]), i) for i in range(4)], ["features", "label"])
print("VECTORS", sorted((c.name, c.dtype, c.shape) for c in materialize(vectors, cache, progress=False).columns),
      flush=True)

def read_shard(data):
    from sparkrunner.data import NumpyLoader

    return [int(i) for batch in NumpyLoader(data, 10, seed=1) for i in batch["id"]]

for launcher in ("direct", "mpirun"):
    shards = Runner(np=2, spark=spark, launcher=launcher).run_all(read_shard, first)
    print("SHARDS", launcher, json.dumps(shards), flush=True)
""".replace("ROWS", str(ROWS))


def _line(out: str, prefix: str) -> str:
    found = [line for line in out.splitlines() if line.startswith(prefix + " ")]
    assert found, f"no {prefix!r} line in:\n{out}"
    return found[0][len(prefix) + 1 :]


def test_materialize_a_connect_dataframe_and_read_it_in_a_connect_run(tmp_path: Path) -> None:
    script = DRIVER.replace("TMP = Path(sys.argv[1])", f"TMP = Path({str(tmp_path)!r})")
    out = run_driver(script, tmp_path, seconds=900)
    assert _line(out, "SESSIONS") == "True", out
    assert _line(out, "WRITTEN") == "1000 ('id', 'x')", out
    assert f"materialized {ROWS:,} rows into" in out, out
    table = pq.read_table(_line(out, "URI"))
    assert sorted(zip(table["id"].to_pylist(), table["x"].to_pylist(), strict=True)) == [
        (i, float(i % 7 * 2)) for i in range(ROWS)
    ]
    assert str(table.schema.field("x").type) == "float"
    assert _line(out, "REUSED") == "True True", "another Connect session must reuse data named by its files"
    assert _line(out, "FILES") == "False"
    assert _line(out, "UDF") == "True True True", "a UDF: keyed to the session and the DataFrame"
    assert _line(out, "RAND") == "True True"
    assert _line(out, "LOCAL") == "True"
    assert _line(out, "TABLE") == "True True", "tables and SQL are resolved in the server's catalog"
    assert _line(out, "BUILTIN") == "False", "built-in functions name their data"
    assert _line(out, "LOCAL DATA") == "True"
    assert _line(out, "VECTORS") == "[('features', 'float32', (2,)), ('label', 'int64', ())]"
    for launcher in ("direct", "mpirun"):
        shards = json.loads(_line(out, f"SHARDS {launcher}"))
        assert [len(s) for s in shards] == [ROWS // 2, ROWS // 2], launcher
        assert set(shards[0]).isdisjoint(shards[1]), f"{launcher}: shards overlap"
        assert sorted(shards[0] + shards[1]) == list(range(ROWS)), f"{launcher}: rows missing"
    assert leftover_rank_processes(grace_s=10) == {}
