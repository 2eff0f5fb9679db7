"""The true cause of a failed run: which rank, task and host, how it ended, and what it printed last."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.common.rank_job import RankJob
from sparkrunner.driver.run import RunPipeline
from sparkrunner.errors import RankFailedError, SparkRunnerError
from sparkrunner.launch import Launcher
from sparkrunner.launch.direct import DirectLauncher
from sparkrunner.placement import Placement
from sparkrunner.placement.factory import ColdPlacements
from sparkrunner.placement.local import LocalPlacement
from sparkrunner.system.processes import RankProcess
from sparkrunner.topology import Topology
from tests.driver.conftest import wait_for_both_executors
from tests.driver.functions import crashes_after_a_line, killed_on_rank_one, rank_one_hangs_up_then_dies
from tests.matrix import LAUNCHERS


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_log_callback_only_still_shows_a_crashed_ranks_last_lines(np2: int, launcher: str) -> None:
    runner = Runner(np=np2, launcher=launcher, driver_log_verbosity="log_callback_only", tracking=False)
    with pytest.raises(RankFailedError) as info:
        runner.run(crashes_after_a_line)
    error = info.value
    assert error.rank == 1 and error.exc_type == "RankProcessDied"
    assert "loss went nan at step 42" in str(error)
    assert "about to write the checkpoint" in str(error)
    # stdout and stderr travel separately: their relative order is not kept
    assert set(error.output_tail[-2:]) == {"loss went nan at step 42", "about to write the checkpoint"}


def test_spark_direct_names_rank_task_and_host_in_one_numbering(spark_cluster: Any) -> None:
    wait_for_both_executors(spark_cluster)
    with pytest.raises(RankFailedError) as info:
        Runner(np=2, launcher="direct", tracking=False).run(killed_on_rank_one)
    text = str(info.value)
    assert info.value.rank == 1
    assert "rank 1 ran in barrier task 1, host" in text
    assert "the rank process of barrier task 1" in text and "killed by SIGKILL" in text
    assert "barrier task 0" not in text  # the survivor's task, killed afterwards, is not the cause
    assert "no exit code is known yet" not in text  # the task told the driver at once


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["np-2-on-driver", "spark"])
def test_the_rank_that_died_is_the_cause_not_its_peer_that_lost_the_connection(
    placement: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    np = -2 if placement == "np-2-on-driver" else 2
    if np > 0:
        wait_for_both_executors(request.getfixturevalue("spark_cluster"))
    with pytest.raises(RankFailedError) as info:
        Runner(np=np, launcher="direct", tracking=False).run(rank_one_hangs_up_then_dies, str(tmp_path))
    error = info.value
    assert error.rank == 1, str(error)
    assert error.exc_type == "RankProcessDied"
    assert "code 7" in str(error)
    peers = {e.rank: e for e in error.other_failures}
    assert set(peers) == {0}, str(error)  # rank 0's consequential error arrived first, and is kept as such
    assert "closed" in peers[0].exc_message.lower() or "peer" in peers[0].exc_message.lower()


def test_a_failing_barrier_task_brings_its_python_traceback(spark_cluster: Any) -> None:
    wait_for_both_executors(spark_cluster)
    missing = f"/nonexistent-{os.getpid()}"
    runner = Runner(np=2, launcher="mpirun", env={"PATH": missing}, tracking=False)
    with pytest.raises(SparkRunnerError) as info:
        runner.run(print)
    text = str(info.value)
    assert "barrier task 0" in text and "failed:" in text
    assert "Traceback (most recent call last)" in text
    assert "FileNotFoundError" in text and "mpirun" in text


class _CancelFailsPlacement(LocalPlacement):
    """Stand-in for a Spark cancel that fails while stopping (e.g. a lost SparkContext): stops, then raises."""

    def stop(self) -> None:
        super().stop()
        raise RuntimeError("cancel failed while stopping")


class _CancelFails(ColdPlacements):
    """The placement factory of a run (np=-2) whose every placement fails while stopping."""

    def __call__(self, launcher: Launcher, spark: Any, tasks: int) -> Placement:
        return _CancelFailsPlacement(2, launcher)


def test_an_error_while_shutting_down_never_replaces_the_runs_error() -> None:
    options = Runner(np=-2, launcher="direct", tracking=False).options
    with pytest.raises(RankFailedError) as info:
        RunPipeline(options, [], _CancelFails(-2, options.start_timeout, None)).run(
            killed_on_rank_one, (), {}
        )
    assert info.value.rank == 1
    assert isinstance(info.value.__dict__["shutdown_error"], RuntimeError)
    assert any("cancel failed while stopping" in note for note in getattr(info.value, "__notes__", []))


class _TwoShellRanks(DirectLauncher):
    """Stand-in launcher (np<0 placement, real processes): rank 1 exits with code 7 after rank 0 failed (code 1),
    the order in which a peer that lost its connection fails before the rank that hung up has died."""

    def __init__(self, gate: Path) -> None:
        super().__init__()
        self.gate = gate
        """A FIFO: rank 1 exits once the test opens it for writing."""
        self.started: list[RankProcess] = []

    def start_local(self, job: RankJob, topology: Topology) -> list[RankProcess]:
        env = {"PATH": os.environ["PATH"]}
        second = RankProcess(["sh", "-c", f"read _ < {self.gate}; exit 7"], env)
        self.started = [RankProcess(["sh", "-c", "exit 1"], env), second]
        return self.started


def test_np_below_zero_describes_the_dead_ranks_own_exit_never_a_peers(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    launcher = _TwoShellRanks(gate)
    placement = LocalPlacement(2, launcher)
    placement.start(RankJob("run", ("127.0.0.1", 1), b"secret"))
    first, second = launcher.started
    try:
        first.wait()
        assert placement.failure(second.pid) is None  # rank 1 still runs: its exit is not known yet
        gate.open("w").close()  # rank 1 exits only now
        second.wait()
        assert f"process {second.pid} exited with code 7" in str(placement.failure(second.pid))
        assert f"process {first.pid} exited with code 1" in str(placement.failure(None))
    finally:
        placement.stop()
