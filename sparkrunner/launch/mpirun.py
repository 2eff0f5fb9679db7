"""The mpirun launcher (the HorovodRunner shape): one mpirun starts every rank, no ssh anywhere.

`np < 0`: mpirun runs on the driver and starts |np| ranks there. `np > 0`: barrier task 0 writes a host file
(slots = tasks per host) and runs mpirun; mpirun starts each other host's daemon through `rsh_agent`, which
asks the task agent of the first barrier task on that host to run it: remote ranks live inside a Spark task.
Every other task serves (or idles) until task 0 tells it that mpirun has ended (`mpirun_end_notice.py`). What
runs in a barrier task only is in `tasks/` (`mpirun_task.py` and the modules it uses).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import sys

from sparkrunner.common.checks import PortRange
from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import RankJob
from sparkrunner.errors import LauncherUnavailableError
from sparkrunner.frameworks.horovod_build import horovod_has_mpi
from sparkrunner.launch.base import Launcher, close_after, worker_command
from sparkrunner.system.network import mpi_port_split
from sparkrunner.system.processes import RankHandle, RankProcess
from sparkrunner.system.rank_environment import rank_process_environment
from sparkrunner.system.secret_files import SecretDrop
from sparkrunner.system.temp_folder import WatchedFolder
from sparkrunner.topology import Topology

log = logging.getLogger(__name__)

_ALWAYS_EXPORTED = ("PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
FOLDER_PREFIX = "sparkrunner-mpirun-"  # mpirun's temp folder: its host file and Open MPI's session folder


def shared_environment(job: RankJob, topology: Topology, in_spark_task: bool) -> dict[str, str]:
    """The rank environment minus what differs per rank (each rank derives that from the topology it gets)."""
    topology = topology.in_host_order()
    per_index = [
        rank_process_environment(
            job, topology, i, echo_output=in_spark_task and job.echo_output, in_spark_task=False, gloo=False
        )
        for i in range(topology.size)
    ]
    common = {k: v for k, v in per_index[0].items() if all(env.get(k) == v for env in per_index[1:])}
    common[Env.TOPOLOGY] = topology.to_json()
    return common


def exported_names(env: dict[str, str], job: RankJob) -> list[str]:
    """Variables passed to remote ranks with -x: whatever sparkrunner or the user set, plus the paths."""
    names = {k for k, v in env.items() if os.environ.get(k) != v} | set(job.user_env)
    names |= {k for k in _ALWAYS_EXPORTED if k in env}
    return sorted(names)


DEAD_RANK_ENDS_AT_ONCE = ("--mca", "odls_base_sigkill_timeout", "0")
"""When a rank dies, Open MPI's daemons send its peers SIGCONT, sleep this many seconds (default 1), send SIGTERM,
sleep again, then SIGKILL; mpirun exits, and prints the banner with the dead rank's exit code, only after that.
The driver waits for that exit code (the error names it), so the default second made a run under mpirun end
about 1 s later than under the direct launcher (bench/dead_rank.py). With 0 the peers get SIGTERM and SIGKILL
together: a rank's death ends its peers at once, as Open MPI's job abort means to. The driver's own stops (a
timeout, Ctrl-C, a cancelled job, a resize) still give the ranks that save their `stop_grace_s`: a rank that does
not save waits instead of exiting while a peer saves (`graceful_stop`), so its exit cannot trigger the abort."""


def mpirun_command(
    np: int, placement: list[str], env_names: list[str], network: str | None, ports: PortRange | None = None
) -> list[str]:
    """The mpirun command: explicit env, root allowed, our rsh agent, no wait before a dead rank's peers are
    ended, the network that joins the peers' addresses (never a decoy such as docker0), and MPI's TCP ports
    inside `ports` when given."""
    agent = f"{sys.executable} -m sparkrunner.tasks.rsh_agent"
    cmd = ["mpirun", "--allow-run-as-root", "-np", str(np), "--bind-to", "none", "--map-by", "slot"]
    cmd += [*placement, "--mca", "plm_rsh_agent", agent, *DEAD_RANK_ENDS_AT_ONCE]
    if network is not None:
        cmd += ["--mca", "btl_tcp_if_include", network, "--mca", "oob_tcp_if_include", network]
    if ports is not None:
        (low, high), (oob_low, oob_high) = mpi_port_split(ports)
        for v in ("4", "6"):  # ranks and daemons listen on both families, each on its own port
            cmd += ["--mca", f"btl_tcp_port_min_v{v}", str(low), "--mca", f"btl_tcp_port_range_v{v}"]
            cmd += [str(high - low + 1), "--mca", f"oob_tcp_dynamic_ipv{v}_ports", f"{oob_low}-{oob_high}"]
    for name in env_names:
        cmd += ["-x", name]
    return cmd + worker_command()


_RANK_SIGNALLED = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
_RANK_EXITED = re.compile(r"Process name: *\[\[\d+,\d+\],(\d+)\]\s+Exit code: *(\d+)")


def rank_exit_from_banner(output: str, rank: int) -> int | None:
    """How mpirun's banner says `rank` ended: -signal when it was killed by a signal (Open MPI: "mpirun noticed
    that process rank 1 with PID 0 on node h exited on signal 9 (Killed)."), its exit code when it exited
    non-zero first ("Process name: [[938,1],1]" then "Exit code: 3"); None when it does not say."""
    signalled = (-int(sig) for r, sig in _RANK_SIGNALLED.findall(output) if int(r) == rank)
    exited = (int(code) for r, code in _RANK_EXITED.findall(output) if int(r) == rank)
    return next(signalled, None) or next(exited, None)


def session_dir_env(folder: str) -> dict[str, str]:
    """Open MPI keeps its session folder (`ompi.<host>.<uid>`) under `folder`, which the run removes after
    mpirun ends: nothing is left in the machine's temp dir."""
    return {"OMPI_MCA_orte_tmpdir_base": folder}


def hostfile_text(topology: Topology) -> str:
    """One line per host, slots = the barrier tasks on it (mpirun fills the hosts in this order)."""
    return "".join(f"{h} slots={sum(p.host == h for p in topology.peers)}\n" for h in topology.hosts())


class MpirunLauncher(Launcher):
    """Starts every rank with one `mpirun` (Horovod's MPI controller, mpi4py, any MPI program)."""

    name = "mpirun"

    def check_available(self) -> None:
        if shutil.which("mpirun") is None:
            raise LauncherUnavailableError(
                "launcher='mpirun' needs Open MPI's mpirun on PATH (Debian: apt-get install openmpi-bin). "
                "Use launcher='direct' to run without MPI (Horovod then uses Gloo)."
            )
        if not horovod_has_mpi():
            raise LauncherUnavailableError(
                "launcher='mpirun' needs Horovod built with MPI support in this environment (see "
                "docker/build_horovod.sh). Use launcher='direct' to run without MPI (Horovod then uses Gloo)."
            )

    def rank_exit_code(self, output: str, rank: int) -> int | None:
        return rank_exit_from_banner(output, rank)

    def start_local(self, job: RankJob, topology: Topology) -> list[RankHandle]:
        env = shared_environment(job, topology, in_spark_task=False)
        placement = ["--host", f"localhost:{topology.size}"]
        cmd = mpirun_command(topology.size, placement, exported_names(env, job), None, job.port_range)
        drop = SecretDrop()
        drop.put_run_secret(job.secret, range(topology.size))
        tmp = WatchedFolder(FOLDER_PREFIX)
        log.debug("starting mpirun on the driver: %s", shlex.join(cmd))
        ranks: list[RankHandle] = [RankProcess(cmd, {**env, **drop.env(), **session_dir_env(tmp.path)})]
        close_after(ranks, drop.close, tmp.remove)
        return ranks
