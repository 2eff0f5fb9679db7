"""The direct launcher: every barrier task (or local slot) spawns exactly one rank, no MPI involved."""

from __future__ import annotations

from sparkrunner.launch.base import Launcher, RankJob, TaskOutcome, rank_process_environment, worker_command
from sparkrunner.processes import RankProcess
from sparkrunner.topology import Topology


class DirectLauncher(Launcher):
    """One process per rank, wired for torch.distributed (and the other frameworks' env:// variables)."""

    name = "direct"

    def start_local(self, job: RankJob, topology: Topology) -> list[RankProcess]:
        return [
            RankProcess(worker_command(), rank_process_environment(job, topology, i, False, False))
            for i in range(topology.size)
        ]

    def run_in_task(self, job: RankJob, topology: Topology, index: int) -> TaskOutcome:
        env = rank_process_environment(job, topology, index, echo_output=True, in_spark_task=True)
        proc = RankProcess(worker_command(), env, echo_to=1)  # copy to the executor log
        code = proc.wait()
        return TaskOutcome(code, proc.output_tail())
