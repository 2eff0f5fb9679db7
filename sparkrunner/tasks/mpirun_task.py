"""The mpirun launcher's side in a barrier task: task 0 runs mpirun over every task's host, the others serve
mpirun's remote starts (`task_agent.py`, asked by `rsh_agent.py`) or idle until task 0 tells them mpirun has
ended (`mpirun_end_notice.py`); task 0 ends a lingering mpirun once every rank has reported
(`mpirun_shutdown.py`)."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import RankJob, ReportFailure, TaskOutcome, barrier_task_of
from sparkrunner.launch.mpirun import (
    FOLDER_PREFIX,
    exported_names,
    hostfile_text,
    mpirun_command,
    session_dir_env,
    shared_environment,
)
from sparkrunner.system import gpus
from sparkrunner.system.gpus import CUDA_VISIBLE
from sparkrunner.system.network import local_interface
from sparkrunner.system.processes import RankProcess
from sparkrunner.system.secret_files import SecretDrop
from sparkrunner.system.spark_executor import task_environment
from sparkrunner.system.temp_folder import WatchedFolder
from sparkrunner.tasks.mpirun_end_notice import RunEndServer, wait_for_run_end
from sparkrunner.tasks.mpirun_shutdown import RunOverWatch
from sparkrunner.tasks.rank_seeds import RankSeeds
from sparkrunner.tasks.task_agent import TaskAgent, agent_key, agent_tasks, agents_env
from sparkrunner.topology import RankIndex, Topology

log = logging.getLogger(__name__)


def run_mpirun_task(
    job: RankJob, topology: Topology, index: RankIndex, report_failure: ReportFailure, seeds: RankSeeds
) -> TaskOutcome:
    """Task 0 runs mpirun (one process: its outcome is the task's); the others serve or idle. (mpirun starts the
    ranks: `seeds` holds none.)"""
    # No BarrierTaskContext.barrier() here: a task cancelled while it waits there costs its executor.
    key = agent_key(job.secret)
    if index == 0:
        notice = RunEndServer(key, topology)
        outcome = TaskOutcome(1, "")
        try:
            outcome = _run_mpirun(job, topology)
        finally:
            notice.ended(outcome)
        return outcome
    serves = index in agent_tasks(topology).values()
    agent = TaskAgent(job, job.secret, topology, index, barrier_task_of(job, index)) if serves else None
    try:
        return wait_for_run_end(key, topology)  # serve (or idle) until task 0's mpirun ended
    finally:
        if agent is not None:
            agent.stop()


def _run_mpirun(job: RankJob, topology: Topology) -> TaskOutcome:
    env = shared_environment(job, topology, in_spark_task=True)
    names = exported_names(env, job)  # the secret folder is not among them: each host has its own
    env.update(agents_env(topology))
    # mpirun and its local ranks are task 0's to clean up (never exported)
    env.update(task_environment(0))
    env[CUDA_VISIBLE] = gpus.host_devices(topology, topology.peers[0].host)
    env[Env.TASK_GPUS] = ""  # a Spark run: each rank finds its own task's GPUs in the topology
    interface = local_interface(topology.peers[0].host)
    network = interface.network if interface is not None else None
    with WatchedFolder(FOLDER_PREFIX) as tmp, SecretDrop(within=tmp.path) as drop:
        drop.put_run_secret(job.secret, range(topology.local_world_size(0)))
        drop.put_agent_key(agent_key(job.secret), list(agent_tasks(topology)))
        env.update({**drop.env(), **session_dir_env(tmp.path)})
        hostfile = Path(tmp.path, "hostfile")
        hostfile.write_text(hostfile_text(topology))
        cmd = mpirun_command(topology.size, ["--hostfile", str(hostfile)], names, network, job.port_range)
        log.debug("task 0 starts mpirun: %s", shlex.join(cmd))
        proc = RankProcess(cmd, env, echo_to=1)
        watch = RunOverWatch(job.driver, job.secret, proc)
        code = proc.wait()
        watch.close()
    return TaskOutcome(0 if watch.ended_mpirun else code, proc.output_tail())
