"""Faults on the two-host fixture, launcher mpirun, where the wording could differ from one host: mpirun runs in
barrier task 0, and a rank on the other host runs under mpirun's daemon there, which the first task on that host
started (its task reports nothing of the rank's own end).

- np=2 (one barrier task per host), the soak's faults (tests/scenarios/faults/chaos.py) on rank 1, the rank on the
  other host: its executor JVM killed (mpirun loses its daemon and ends with exit code 255 before Spark says that
  the executor was lost: the error must name the lost executor), or rank 1 SIGKILLed (mpirun ends with exit code
  137 and its banner: the error must name rank 1 and its SIGKILL);
- np=4 (two ranks per host), rank 0 (mpirun's host) or rank 3 (the other host, not its task's first rank)
  SIGKILLed: the error names that rank, its SIGKILL and its host.

Either way, as on one host and under `direct`, never mpirun's exit; and no process of the run is left (scanned in
/proc, and in each host's namespace)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankProcessDiedError
from tests.helpers import leftover_rank_processes
from tests.matrix import RUNNABLE_LAUNCHERS
from tests.scenarios.cluster.fixtures import TwoHosts, run_leftovers_on_hosts
from tests.scenarios.faults.chaos import NEVER_SAYS, judge, run_with_fault
from tests.scenarios.faults.leftovers import Leftovers
from tests.waiting import poll_until

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.usefixtures("private_temp_dir"),
    pytest.mark.skipif("mpirun" not in RUNNABLE_LAUNCHERS, reason="needs mpirun and Horovod built with MPI"),
]


@pytest.mark.parametrize("fault", ["sigkill", "executor"])
def test_a_fault_on_the_other_host_is_named_under_mpirun(
    fault: str, two_hosts: TwoHosts, tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    before = Leftovers()
    outcome = run_with_fault(fault, "mpirun", 2, folder, two_hosts.spark, cluster=two_hosts.cluster)
    assert judge(fault, outcome, in_spark=True) == []
    assert before.after(folder) == []


def one_rank_sigkills_itself(killed: int, folder: str) -> None:
    """Every rank writes its host to `folder`; rank `killed` then says a last word and SIGKILLs itself, the
    others wait to be stopped."""
    rank = int(os.environ["RANK"])
    Path(folder, f"host-{rank}").write_text(socket.gethostname())
    if rank == killed:
        # once every rank has written its host (the test's record of where each ran)
        poll_until(lambda: len(list(Path(folder).glob("host-*"))) == int(os.environ["WORLD_SIZE"]), 60)
        print(f"rank {rank} last words", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(300)


@pytest.mark.parametrize("killed", [0, 3])
def test_a_sigkilled_rank_of_four_is_named_with_its_host(
    killed: int, two_hosts: TwoHosts, tmp_path: Path
) -> None:
    runner = Runner(
        np=4, spark=two_hosts.spark, launcher="mpirun", stop_grace_s=1, start_timeout=180, timeout=300,
        tracking=False, progress=False,
    )  # fmt: skip
    with pytest.raises(RankProcessDiedError) as info:
        runner.run(one_rank_sigkills_itself, killed, str(tmp_path))
    error = info.value
    hosts = {rank: tmp_path.joinpath(f"host-{rank}").read_text() for rank in range(4)}
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3], (
        f"two ranks per host, mpirun's with ranks 0-1: {hosts}"
    )
    assert (error.rank, error.exit_code, error.signal) == (killed, -signal.SIGKILL, "SIGKILL"), str(error)
    assert f"rank {killed} failed with RankProcessDied" in str(error), str(error)
    assert "exit code -9 (killed by SIGKILL)" in str(error), str(error)
    assert f"host {hosts[killed]}" in error.location, str(error)
    assert [text for text in NEVER_SAYS if text in str(error)] == [], str(error)
    assert error.output_tail[-1:] == (f"rank {killed} last words",), error.output_tail
    assert leftover_rank_processes(grace_s=10) == {}
    assert run_leftovers_on_hosts(two_hosts.cluster) == {ns: [] for ns in two_hosts.cluster.namespaces}
