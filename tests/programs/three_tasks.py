"""np=6, ranks_per_task=2 on local[3] (tests/tasks/test_barrier_task.py): which task started each rank,
and where a dead rank 3 is reported."""

import os
import time

from pyspark.sql import SparkSession

from sparkrunner import Runner
from sparkrunner.errors import RankFailedError

spark = (
    SparkSession.builder.master("local[3]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def outlive_task_two():
    rank = int(os.environ["RANK"])
    if rank < 4:  # tasks 0 and 1 go on after task 2 (ranks 4, 5) has ended and cleaned up after itself
        time.sleep(10)
    return rank, os.environ["SPARKRUNNER_STARTED_BY_TASK"]


def rank_three_dies():
    if os.environ["RANK"] == "3":
        print("rank 3 exits", flush=True)
        os._exit(7)
    time.sleep(120)


print("ALL", Runner(np=6, ranks_per_task=2, launcher="direct").run_all(outlive_task_two), flush=True)
try:
    Runner(np=6, ranks_per_task=2, launcher="direct", stop_grace_s=1).run(rank_three_dies)
except RankFailedError as exc:
    print("FAILED", exc.rank, "|", exc.location, "|", " ".join(str(exc).split()), flush=True)
