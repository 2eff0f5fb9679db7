"""np > 0 on a Spark Connect session, against a real local Connect server: barrier mapInArrow, results,
output, errors, slots, an unreachable client, a run from a worker thread, Ctrl-C through job tags.

Each test runs its own driver process (the server must not share the pytest process with the classic
session of the other tests). Launchers `direct` and `mpirun`, as named in each run.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import leftover_rank_processes, run_driver, start_driver, wait_for_line

CORE_DRIVER = """
import os, threading
from sparkrunner import Runner
from sparkrunner.errors import NotEnoughSlotsError, RankFailedError, SparkRunnerError
from sparkrunner.channel.environment import Env
from tests.connect.server import start_connect_session

server, spark = start_connect_session()
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
found = {}
thread = threading.Thread(target=lambda: found.update(value=Runner(np=2, launcher="direct").run(main, 7)))
thread.start()
thread.join(300)
print("THREAD", found, flush=True)
os.environ[Env.DRIVER_HOST] = "unreachable.invalid"
try:
    Runner(np=2, spark=spark, launcher="direct", start_timeout=120).run(main, 0)
except SparkRunnerError as exc:
    print("UNREACHABLE", " ".join(str(exc).split()), flush=True)
print("ACTIVE JOBS", list(server.sparkContext.statusTracker().getActiveJobsIds()), flush=True)
"""


def test_runs_results_errors_and_slots_over_spark_connect(tmp_path: Path) -> None:
    out = run_driver(CORE_DRIVER, tmp_path, seconds=600)
    assert "SESSION pyspark.sql.connect.session" in out, out
    assert "ALL [10, 11]" in out, out
    for rank in range(2):
        assert f"[rank {rank}] hello from rank {rank} of 2" in out
    assert "RANK0 5" in out, out
    assert "FAILED 1 KeyError True" in out, out
    assert "SLOTS np=3 needs 3 task slots at once, but this Spark cluster has 2" in out, out
    assert "THREAD {'value': 7}" in out, "a worker thread must find the Connect session"
    assert "could not connect to this Spark Connect client at unreachable.invalid" in out, out
    assert "ACTIVE JOBS []" in out, out


CTRL_C_DRIVER = """
import time
from sparkrunner import Runner
from tests.connect.server import start_connect_session

server, spark = start_connect_session()

def main():
    print("rank started", flush=True)
    time.sleep(600)

try:
    Runner(np=2, spark=spark, launcher="direct").run(main)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
deadline = time.monotonic() + 60
while server.sparkContext.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
    time.sleep(0.5)
print("ACTIVE JOBS", list(server.sparkContext.statusTracker().getActiveJobsIds()), flush=True)
"""


def test_ctrl_c_interrupts_the_tagged_job_and_every_rank(tmp_path: Path) -> None:
    proc = start_driver(CTRL_C_DRIVER, tmp_path)
    try:
        wait_for_line(proc, "rank started", seconds=300)
        proc.send_signal(2)
        out, _ = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in out
    assert "ACTIVE JOBS []" in out, out
    assert leftover_rank_processes(grace_s=15) == {}
