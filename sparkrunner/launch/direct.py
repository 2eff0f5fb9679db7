"""The direct launcher: every barrier task (or local group, np < 0) spawns exactly one rank, no MPI involved."""

from __future__ import annotations

import functools

from sparkrunner import frameworks
from sparkrunner.channel import launch_times
from sparkrunner.common.rank_job import RankJob
from sparkrunner.launch.base import Launcher, close_after, worker_command
from sparkrunner.system import zygote_link
from sparkrunner.system.processes import RankHandle, RankProcess
from sparkrunner.system.rank_environment import rank_process_environment
from sparkrunner.system.secret_files import SecretDrop
from sparkrunner.topology import Topology


class DirectLauncher(Launcher):
    """One process per rank, wired for torch.distributed, Horovod over Gloo and the other env:// variables."""

    name = "direct"

    def start_local(self, job: RankJob, topology: Topology) -> list[RankHandle]:
        """Each rank forked from the driver's zygote when the run starts warm (`job.zygote`), else (or when the
        zygote cannot serve) started as a new interpreter."""
        services = frameworks.task_services(topology, 0, job.uses_horovod)
        services.__enter__()
        drop = SecretDrop()
        drop.put_run_secret(job.secret, [topology.local_rank(i) for i in range(topology.size)])
        ranks = [
            _start_rank(job, {**rank_process_environment(job, topology, i, False, False), **drop.env()})
            for i in range(topology.size)
        ]
        close_after(ranks, drop.close, lambda: services.__exit__(None, None, None))
        return ranks


def _start_rank(job: RankJob, env: dict[str, str]) -> RankHandle:
    env = {**env, **launch_times.launcher_variable(job.task_times)}  # None: no barrier task here
    spec, forked = job.zygote, None
    if spec is not None and spec.socket is not None:
        reach = functools.partial(zygote_link.connect, spec.socket, spec.key)
        forked = zygote_link.fork_rank(reach, worker_command(), env, None)
    return forked or RankProcess(worker_command(), env)
