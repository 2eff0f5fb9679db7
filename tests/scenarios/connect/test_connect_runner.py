"""np > 0 on a Spark Connect session, against a real local Connect server: barrier mapInArrow, results,
output, errors, slots, an unreachable client, a run from a worker thread, Ctrl-C through job tags.

Each test runs its own client driver process against the shared Connect server (tests/scenarios/connect/server.py);
the test asks the server for its active jobs once the client has ended. Launchers `direct` and `mpirun`, as named
in each run.
"""

from __future__ import annotations

import signal
import subprocess
import time

from tests.helpers import leftover_rank_processes, run_driver, start_driver, wait_for_line
from tests.scenarios.connect.server import ConnectServer
from tests.waiting import poll_until


def test_runs_results_errors_and_slots_over_spark_connect(connect_server: ConnectServer) -> None:
    out = run_driver("connect_core", connect_server.url, seconds=600)
    assert "SESSION pyspark.sql.connect.session" in out, out
    assert "ALL [10, 11]" in out, out
    for rank in range(2):
        assert f"[rank {rank}] hello from rank {rank} of 2" in out
    assert "RANK0 5" in out, out
    assert "FAILED 1 KeyError True" in out, out
    assert "SLOTS np=3 needs 3 task slots at once, but this Spark cluster has 2" in out, out
    assert "THREAD {'value': 7}" in out, "a worker thread must find the Connect session"
    assert "could not connect to this Spark Connect client at unreachable.invalid" in out, out
    assert connect_server.active_jobs() == [], out


def test_ctrl_c_interrupts_the_tagged_job_and_every_rank(connect_server: ConnectServer) -> None:
    """On the shared server, which has served the other Connect tests' clients (their runs, fits and scorings in
    its reused Python workers): Ctrl-C ends the client's run with KeyboardInterrupt, and the tagged job ends. A
    client that has not ended within the bound prints its threads' stacks into the failure."""
    proc = start_driver("connect_ctrl_c", connect_server.url)
    try:
        wait_for_line(proc, "rank started", seconds=300)
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)  # a bound, not a timing: it ends in seconds
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            proc.kill()
            out = proc.communicate()[0]
    finally:
        proc.kill()
    assert "KeyboardInterrupt" in out, out[-20000:]
    assert poll_until(lambda: not connect_server.active_jobs(), 60), "the tagged job was not cancelled"
    assert leftover_rank_processes(grace_s=15) == {}
