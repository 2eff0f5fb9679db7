"""The environment of a rank process, as whichever launcher starts it builds it: inherited, the user's, the
run's variables and sparkrunner's defaults (frameworks' wiring, network interface, threads, GPUs), and what of it
decides a zygote's imports."""

from __future__ import annotations

import os

from sparkrunner import frameworks
from sparkrunner.common import user_env
from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import RankJob, barrier_task_of
from sparkrunner.system import gpus, network
from sparkrunner.system.spark_executor import task_environment
from sparkrunner.system.zygote_link import imports_environment
from sparkrunner.topology import RankIndex, Topology


def rank_process_environment(
    job: RankJob, topology: Topology, index: int, echo_output: bool, in_spark_task: bool, gloo: bool = True
) -> dict[str, str]:
    """The full environment of the rank at `index`: inherited, then the user's `env=`, then the run's variables
    (`options.RUN_VARIABLES`, which env= may not name); sparkrunner's defaults fill only what is unset, and
    PYTHONPATH keeps the user's entries first. `gloo`: Horovod's Gloo wiring (not under mpirun: MPI there).

    The run secret is not in it: the spawner hands it over with a `secret_files.SecretDrop`."""
    inherited = os.environ.get("PYTHONPATH")  # (before a framework's defaults)
    env = {**os.environ, **job.user_env}
    env.update(frameworks.rank_environment(topology, index, gloo))
    for name, value in _defaults(topology, index, gloo, env).items():
        env.setdefault(name, value)  # a value the user, the driver or the cluster chose wins
    env.update(
        {
            Env.RUN_ID: job.run_id,
            Env.ATTEMPT_ID: job.attempt_id,
            Env.DRIVER: f"{job.driver[0]}:{job.driver[1]}",
            Env.ECHO_OUTPUT: "1" if echo_output else "0",
            Env.USE_GPU: gpus.use_gpu_value(job.use_gpu),
            "PYTHONPATH": _python_path(job.user_env, inherited),
        }
    )
    if job.port_range is not None:  # servers a rank opens (a stream's) take their ports from it too
        env[Env.PORT_RANGE] = "-".join(map(str, job.port_range))
    if job.barrier_stage is not None:  # also under mpirun, whose shared environment says in_spark_task=False
        env[Env.BARRIER_STAGE] = job.barrier_stage
    if in_spark_task:
        env.update(task_environment(barrier_task_of(job, RankIndex(index))))
        # GPUs come from Spark's task resources; none means none, not "all of the machine's"
        env[Env.TASK_GPUS] = ",".join(topology.peers[index].gpus)
        env[gpus.CUDA_VISIBLE] = gpus.host_devices(topology, topology.peers[index].host)
    return env


def _defaults(topology: Topology, index: int, gloo: bool, chosen: dict[str, str]) -> dict[str, str]:
    """What sparkrunner sets for the rank at `index` unless `chosen` (its environment so far) has it: frameworks'
    defaults, the interface that reaches the peers, unbuffered output, and one OpenMP thread when ranks share a
    host."""
    env = {**frameworks.rank_defaults(chosen, gloo), "PYTHONUNBUFFERED": "1"}
    env.update(network.socket_environment(topology.peers[index].host))
    env.update(_thread_defaults(_ranks_on_host(topology, topology.peers[index].host)))
    return env


def _thread_defaults(ranks_on_host: int) -> dict[str, str]:
    """As under torchrun: ranks sharing a host would each start a thread per core and oversubscribe it."""
    return {"OMP_NUM_THREADS": "1"} if ranks_on_host > 1 else {}


def _python_path(job_env: dict[str, str], inherited: str | None) -> str:
    """What the spawning interpreter can import (py-files, notebook folders), the rank can too."""
    return user_env.python_path([job_env.get("PYTHONPATH"), inherited])


def local_imports_environment(job_env: dict[str, str], num_ranks: int) -> dict[str, str]:
    """What decides the imports of each of `num_ranks` ranks on this machine (np < 0), known before their
    topology: the PYTHONPATH and thread counts `rank_process_environment` gives them with `job_env` as the run's
    environment (`zygote_link.imports_environment`)."""
    env = {**_thread_defaults(num_ranks), **os.environ, **job_env}
    env["PYTHONPATH"] = _python_path(job_env, os.environ.get("PYTHONPATH"))
    return imports_environment(env)


def _ranks_on_host(topology: Topology, host: str) -> int:
    return sum(1 for peer in topology.peers if peer.host == host)
