"""A driver whose ranks print "rank started" and sleep, for Ctrl-C and kill tests.

Usage: ``sleeping_ranks.py NP LAUNCHER [CHECKPOINT_DIR]`` (NP < 0: on this machine; NP > 0: in a ``local[2]``
session). With a checkpoint folder the run is retried (``max_failures=2``): every rank of its first attempt
raises, the second attempt's ranks sleep. The driver prints ``RAISED <type>`` for what the run raised.
"""

import sys
import time
from typing import cast

import sparkrunner
from sparkrunner import Runner
from sparkrunner.options import LauncherName


def main() -> None:
    if retried and sparkrunner.rank_context().attempt == 0:
        raise RuntimeError("the first attempt fails")
    print("rank started", flush=True)
    time.sleep(600)


np, launcher = int(sys.argv[1]), cast(LauncherName, sys.argv[2])
checkpoint_dir = sys.argv[3] if len(sys.argv) > 3 else None
retried = checkpoint_dir is not None
if np > 0:
    from pyspark.sql import SparkSession

    SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
try:
    failures = 2 if retried else 0
    Runner(
        np=np,
        launcher=launcher,
        max_failures=failures,
        checkpoint_dir=checkpoint_dir,
        tracking=False,
        progress=False,
    ).run(main)
except BaseException as exc:
    print(f"RAISED {type(exc).__name__}", flush=True)
    raise
