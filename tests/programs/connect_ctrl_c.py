"""Ctrl-C during a Spark Connect run (tests/scenarios/connect/test_connect_runner.py): the tagged job and every rank
must end; prints the server's active jobs afterwards."""

import time

from sparkrunner import Runner
from tests.scenarios.connect.server import start_connect_session
from tests.waiting import poll_until

server, spark = start_connect_session()


def main():
    print("rank started", flush=True)
    time.sleep(600)


try:
    Runner(np=2, spark=spark, launcher="direct").run(main)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
poll_until(lambda: not server.sparkContext.statusTracker().getActiveJobsIds(), 60)  # the cancel lands
print("ACTIVE JOBS", list(server.sparkContext.statusTracker().getActiveJobsIds()), flush=True)
