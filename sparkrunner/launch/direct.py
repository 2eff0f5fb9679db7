"""The direct launcher: every barrier task (or local slot) spawns exactly one rank, no MPI involved."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager

from sparkrunner import frameworks
from sparkrunner.launch.base import Launcher, RankJob, TaskOutcome, rank_process_environment, worker_command
from sparkrunner.processes import RankProcess
from sparkrunner.protocol import Env
from sparkrunner.topology import Topology


class DirectLauncher(Launcher):
    """One process per rank, wired for torch.distributed, Horovod over Gloo and the other env:// variables."""

    name = "direct"

    def start_local(self, job: RankJob, topology: Topology) -> list[RankProcess]:
        services = frameworks.task_services(topology, 0)
        services.__enter__()
        ranks = [
            RankProcess(worker_command(), rank_process_environment(job, topology, i, False, False))
            for i in range(topology.size)
        ]
        threading.Thread(target=_close_after, args=(services, ranks), daemon=True).start()
        return ranks

    def run_in_task(self, job: RankJob, topology: Topology, index: int) -> TaskOutcome:
        env = rank_process_environment(job, topology, index, echo_output=True, in_spark_task=True)
        env[Env.STARTED_BY_TASK] = str(index)
        with frameworks.task_services(topology, index):
            proc = RankProcess(worker_command(), env, echo_to=1)  # copy to the executor log
            code = proc.wait()
        return TaskOutcome(code, proc.output_tail())


def _close_after(services: AbstractContextManager[None], ranks: list[RankProcess]) -> None:
    """Stop the driver-hosted services once every local rank has ended."""
    try:
        for rank in ranks:
            rank.wait()
    finally:
        services.__exit__(None, None, None)
