"""Ctrl-C during a Spark Connect run (tests/scenarios/connect/test_connect_runner.py): `connect_ctrl_c.py URL`; the
tagged job and every rank must end (the test asks the server for its active jobs afterwards). SIGUSR1 prints every
thread's stack (the test asks for them when the client has not ended)."""

import faulthandler
import signal
import sys
import time

from pyspark.sql import SparkSession

from sparkrunner import Runner

faulthandler.register(signal.SIGUSR1, all_threads=True)
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()


def main():
    print("rank started", flush=True)
    time.sleep(600)


try:
    Runner(np=2, spark=spark, launcher="direct").run(main)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
