"""What every launcher provides, and the pieces they share: the rank job and the rank process environment."""

from __future__ import annotations

import os
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from sparkrunner import frameworks
from sparkrunner.common.checks import PortRange
from sparkrunner.common.environment import Env
from sparkrunner.launch import user_env
from sparkrunner.launch.zygote_link import ZygoteSpec, imports_environment
from sparkrunner.system import gpus, network, processes
from sparkrunner.system.spark_executor import task_environment
from sparkrunner.topology import PORTS_PER_RANK, RankIndex, TaskIndex, Topology


@dataclass(frozen=True)
class RankJob:
    """What a rank needs to find the driver; travels to the barrier tasks inside the Spark closure."""

    attempt_id: str
    """The attempt's id (`Attempt.id`), which every process of the attempt carries: how its leftovers are found."""
    driver: tuple[str, int]
    secret: bytes
    user_env: dict[str, str] = field(default_factory=dict)
    uses_horovod: bool | None = None
    """`Runner(horovod=...)`: whether to host Horovod's Gloo rendezvous (`frameworks.horovod_env.hosts_rendezvous`)."""
    use_gpu: bool | None = None
    """`Runner(use_gpu=...)`: None pins each rank to its task's GPUs and warns about unused ones."""
    ranks_per_task: int = 1
    """Ranks each barrier task starts; the topology holds one peer per rank, task by task."""
    port_range: PortRange | None = None
    """Where every port sparkrunner opens must come from (firewalls, network policies); None: anywhere."""
    run_id: str = field(default="", kw_only=True)
    """The run's id (`RunRecord.run_id`), which every process of the run carries."""
    barrier_stage: str | None = None
    """Set by the barrier task: its stage's facts (`BarrierStage` JSON) for the ranks' `BarrierTaskContext`."""
    task_times: tuple[float, float] | None = None
    """Set by the barrier task: when it began and when its addresses were exchanged (`time.monotonic()`), which
    its ranks send on in their `RankLaunch`."""
    zygote: ZygoteSpec | None = None
    """Set for direct Spark runs that may start again (`max_failures`, an np range): ranks fork from their
    executor's zygote; and for direct np < 0 runs that start warm: ranks fork from the driver's."""
    echo_output: bool = True
    """Set by the Spark placement: whether a barrier task's ranks also write their output to the executor's own
    stdout/stderr (its log) besides relaying it; False where that is the driver's console (a local master), which
    would show every line twice."""


@dataclass(frozen=True)
class TaskOutcome:
    """How a barrier task's rank process(es) ended."""

    exit_code: int
    output_tail: str


ReportFailure = Callable[[TaskOutcome], None]
"""How a task's launcher tells the driver at once that one of the task's processes failed."""


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


def barrier_task_of(job: RankJob, index: RankIndex) -> TaskIndex:
    """The index of the barrier task that runs the rank at `index` (tasks hold `ranks_per_task` ranks each)."""
    return TaskIndex(index // job.ranks_per_task)


def close_after(ranks: Sequence[processes.RankHandle], *closers: Callable[[], object]) -> None:
    """In the background: once every local rank has ended, call `closers` (driver-hosted services, secrets)."""

    def wait_then_close() -> None:
        try:
            for rank in ranks:
                rank.wait()
        finally:
            for close in closers:
                close()

    threading.Thread(target=wait_then_close, name="sparkrunner-close-after", daemon=True).start()


def worker_command() -> list[str]:
    return [sys.executable, "-m", "sparkrunner.ranks.bootstrap"]


class Launcher(ABC):
    """Starts ranks. `start_local` runs on the driver (np < 0); inside a barrier task (np > 0) the launcher's
    task side runs, found by its `name` in `sparkrunner.tasks.launchers.TASK_SIDES`."""

    name: ClassVar[str]
    ports_per_rank: ClassVar[int] = PORTS_PER_RANK

    def check_available(self) -> None:  # noqa: B027  (optional hook: most launchers run anywhere)
        """Raise `LauncherUnavailableError` before anything starts when this launcher cannot run here."""

    @abstractmethod
    def start_local(self, job: RankJob, topology: Topology) -> list[processes.RankHandle]:
        """Start every rank on this machine and return the processes to supervise."""

    def rank_exit_code(self, output: str, rank: int) -> int | None:
        """What the launcher's own process printed about how `rank` ended (negative: killed by that signal);
        None where each rank is its own process (its exit code says it all)."""
        return None
