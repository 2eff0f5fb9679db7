"""Driver-only placement (np < 0): |np| rank processes on this machine (forked from the driver's import zygote
unless the run starts cold), no Spark job."""

from __future__ import annotations

from sparkrunner.common.rank_job import RankJob
from sparkrunner.launch import Launcher
from sparkrunner.launch.base import close_after
from sparkrunner.system import gpus
from sparkrunner.system.network import hold_ports, own_ports
from sparkrunner.system.processes import RankHandle
from sparkrunner.topology import Peer, TaskIndex, Topology

LOOPBACK = "127.0.0.1"


def check_local(launcher: Launcher, use_gpu: bool | None) -> None:
    """Raise a typed error before anything starts when ranks cannot run on this machine."""
    launcher.check_available()
    if use_gpu:
        gpus.require_host_gpus()


class LocalPlacement:
    driver_host = LOOPBACK
    bind_host = LOOPBACK
    job_group = None

    def __init__(self, num_ranks: int, launcher: Launcher) -> None:
        self._num_ranks = num_ranks
        self._launcher = launcher
        self._procs: list[RankHandle] = []

    def start(self, job: RankJob, description: str = "") -> None:
        """Start the ranks; the driver holds their ports until every rank has ended (`HeldPorts`)."""
        held = hold_ports(self._num_ranks * self._launcher.ports_per_rank, own_ports(job.port_range))
        k = self._launcher.ports_per_rank
        peers = tuple(
            Peer(LOOPBACK, held.ports[i * k : (i + 1) * k], (), TaskIndex(i)) for i in range(self._num_ranks)
        )
        try:
            self._procs = self._launcher.start_local(job, Topology(peers))
        except BaseException:
            held.close()
            raise
        close_after(self._procs, held.close)

    def failure(self, pid: int | None = None) -> str | None:
        """How a process ended abnormally: the rank's own (`pid`) when it is one of ours, else any."""
        own = [proc for proc in self._procs if proc.pid == pid]
        for proc in own or self._procs:  # a peer that failed in consequence is never the rank's exit
            code = proc.poll()
            if code not in (None, 0):
                return f"process {proc.pid} exited with code {code}; its last output:\n{proc.output_tail()}"
        return None

    def exit_code(self, rank: int, pid: int | None) -> int | None:
        """The rank's own process's code; under a launcher that starts every rank from one process (mpirun),
        what that process said about the rank."""
        for proc in self._procs:
            code = proc.poll()
            if code is None:
                continue
            if proc.pid == pid:
                return code
            said = self._launcher.rank_exit_code(proc.output_tail(), rank)
            if said is not None:
                return said
        return None

    def decommissioning(self, spark_task_ids: dict[int, int]) -> str | None:
        return None  # no executors

    def cancelled(self) -> str | None:
        return None  # no Spark job to cancel: Ctrl-C stops a local run

    def finished(self) -> bool:
        return all(proc.poll() is not None for proc in self._procs)

    def stop(self) -> None:
        for proc in self._procs:
            proc.kill()
