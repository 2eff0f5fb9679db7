"""Runs, results, errors, slots, a worker thread and an unreachable client over a local Spark Connect server
(tests/scenarios/connect/test_connect_runner.py): `connect_core.py URL`; prints one line per check."""

import os
import sys
import threading

from pyspark.sql import SparkSession

from sparkrunner import Runner
from sparkrunner.common.environment import Env
from sparkrunner.errors import NotEnoughSlotsError, RankFailedError, SparkRunnerError

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
print("SESSION", type(spark).__module__, flush=True)


def main(offset):
    print("hello from rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], flush=True)
    return int(os.environ["RANK"]) + offset


def fails():
    if os.environ["RANK"] == "1":
        raise KeyError("missing column 'label'")


print("ALL", Runner(np=2, spark=spark, launcher="direct").run_all(main, 10), flush=True)
print("RANK0", Runner(np=2, spark=spark, launcher="mpirun").run(main, 5), flush=True)
try:
    Runner(np=2, spark=spark, launcher="direct").run(fails)
except RankFailedError as exc:
    print("FAILED", exc.rank, exc.exc_type, "in fails" in exc.remote_traceback, flush=True)
try:
    Runner(np=3, spark=spark, launcher="direct").run(main, 0)
except NotEnoughSlotsError as exc:
    print("SLOTS", exc, flush=True)
found: dict[str, int] = {}
thread = threading.Thread(target=lambda: found.update(value=Runner(np=2, launcher="direct").run(main, 7)))
thread.start()
thread.join(300)
print("THREAD", found, flush=True)
os.environ[Env.DRIVER_HOST] = "unreachable.invalid"
try:
    Runner(np=2, spark=spark, launcher="direct", start_timeout=120).run(main, 0)
except SparkRunnerError as exc:
    print("UNREACHABLE", " ".join(str(exc).split()), flush=True)
