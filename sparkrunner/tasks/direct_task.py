"""The direct launcher's side in a barrier task: the task starts its own ranks (forked from the executor's
zygote when the run has one) and waits for all of them."""

from __future__ import annotations

import time

from sparkrunner import frameworks
from sparkrunner.channel import launch_times
from sparkrunner.common.rank_job import RankJob, ReportFailure, TaskOutcome
from sparkrunner.launch.base import worker_command
from sparkrunner.system.processes import RankHandle, RankProcess
from sparkrunner.system.rank_environment import rank_process_environment
from sparkrunner.system.temp_folder import WatchedSecretDrop
from sparkrunner.tasks import zygote_client
from sparkrunner.tasks.rank_seeds import RankSeeds
from sparkrunner.timeouts import DIRECT_POLL_S
from sparkrunner.topology import RankIndex, Topology


def run_direct_task(
    job: RankJob, topology: Topology, index: RankIndex, report_failure: ReportFailure, seeds: RankSeeds
) -> TaskOutcome:
    """Start this task's ranks (`index` is its first; `job.ranks_per_task` of them: from `seeds` while there are)
    and wait for all."""
    ranks = range(index, index + job.ranks_per_task)
    with frameworks.task_services(topology, index, job.uses_horovod), WatchedSecretDrop() as drop:
        drop.put_run_secret(job.secret, [topology.local_rank(i) for i in ranks])
        procs = [
            _start_rank(
                job,
                {**rank_process_environment(job, topology, i, job.echo_output, True), **drop.env()},
                seeds,
            )
            for i in ranks
        ]
        return _wait_for_all(procs, report_failure)


def _start_rank(job: RankJob, env: dict[str, str], seeds: RankSeeds) -> RankHandle:
    """Fork the rank from the executor's zygote when the run has one, else make a seed of this task the rank,
    else start it as a new process; echo: a copy of its output goes to the executor log."""
    env = {**env, **launch_times.launcher_variable(job.task_times)}
    forked: RankHandle | None
    if job.zygote is not None:
        forked = zygote_client.fork_rank(job.zygote, worker_command(), env, 1)
    else:
        forked = seeds.take(worker_command(), env, 1)
    return forked or RankProcess(worker_command(), env, echo_to=1)


def _wait_for_all(procs: list[RankHandle], report_failure: ReportFailure) -> TaskOutcome:
    """Wait for every process; the first to fail (in time) is reported at once and is the task's outcome."""
    first_failure: TaskOutcome | None = None
    running = list(procs)
    while running:
        for proc in [p for p in running if p.poll() is not None]:
            running.remove(proc)
            code = proc.wait()  # ended: this only lets its output reach the tail
            if code != 0 and first_failure is None:
                first_failure = TaskOutcome(code, proc.output_tail())
                report_failure(first_failure)
        if running:
            time.sleep(DIRECT_POLL_S)
    return first_failure or TaskOutcome(0, procs[0].output_tail())
