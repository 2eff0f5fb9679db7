"""A driver whose ranks print "rank started" and sleep, for Ctrl-C and kill tests.

Usage: ``sleeping_ranks.py NP LAUNCHER`` (NP < 0: on this machine; NP > 0: in a ``local[2]`` session).
"""

import sys
import time
from typing import cast

from sparkrunner import Runner
from sparkrunner.options import LauncherName


def main() -> None:
    print("rank started", flush=True)
    time.sleep(600)


np, launcher = int(sys.argv[1]), cast(LauncherName, sys.argv[2])
if np > 0:
    from pyspark.sql import SparkSession

    SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
Runner(np=np, launcher=launcher).run(main)
