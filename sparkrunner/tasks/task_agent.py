"""The task agent: serves mpirun's remote-start requests inside a barrier task, so no ssh is needed.

mpirun starts one daemon (orted) per remote host through its `plm_rsh_agent`. Ours (`rsh_agent.py`) connects
to the agent of the barrier task already running on that host, authenticated with a key derived from the run
secret, and asks it to run the command. The daemon then lives inside that Spark task: cancelling the task
kills it (the daemon dies with the task's process), and the task sweeps what is left when the run ends.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading

from sparkrunner.channel import ChannelServer, Connection
from sparkrunner.channel import messages as m
from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import RankJob
from sparkrunner.system import gpus, processes
from sparkrunner.system.gpus import CUDA_VISIBLE
from sparkrunner.system.spark_executor import task_environment
from sparkrunner.system.temp_folder import WatchedSecretDrop
from sparkrunner.topology import PortUse, Topology


def agent_key(run_secret: bytes) -> bytes:
    """The task agents' secret: derived from the run secret, so it is useless on the driver channel."""
    return hmac.new(run_secret, b"sparkrunner task agent", hashlib.sha256).digest()


def agent_tasks(topology: Topology) -> dict[str, int]:
    """For each host but task 0's: the first task on it, whose agent starts that host's daemon."""
    first: dict[str, int] = {}
    for index, peer in enumerate(topology.peers):
        first.setdefault(peer.host, index)
    first.pop(topology.peers[0].host)
    return first


def agents_env(topology: Topology) -> dict[str, str]:
    """Variables that tell `rsh_agent` (a child of mpirun) where each host's agent listens (its key comes
    through `secret_files`)."""
    where = {host: topology.peers[i].ports[PortUse.TASK_AGENT] for host, i in agent_tasks(topology).items()}
    return {Env.TASK_AGENTS: json.dumps(where)}


class TaskAgent:
    """Runs remote-start commands for this task's host; every process it starts carries the run id and the
    index of barrier task `task`, whose first rank is at `index` in the topology."""

    def __init__(self, job: RankJob, run_secret: bytes, topology: Topology, index: int, task: int) -> None:
        peer = topology.peers[index]
        # the ranks mpirun's daemon starts here inherit the daemon's environment: they find their secret here
        self._secrets = WatchedSecretDrop()
        self._secrets.put_run_secret(run_secret, range(topology.local_world_size(index)))
        self._env = {
            **os.environ,
            **self._secrets.env(),
            Env.RUN_ID: job.run_id,
            Env.ATTEMPT_ID: job.attempt_id,
            **task_environment(task),
            CUDA_VISIBLE: gpus.host_devices(topology, peer.host),
        }
        self._started: list[processes.RankProcess] = []
        self._lock = threading.Lock()
        self._server = ChannelServer(
            agent_key(run_secret),
            m.serving(self._on_message),
            lambda _: None,
            peer.host,  # the address mpirun's rsh agent uses, never every interface
            peer.ports[PortUse.TASK_AGENT],
        )

    def _on_message(self, conn: Connection, message: m.Message) -> None:
        """Run one command the way a remote shell would, and answer with its exit code."""
        if not isinstance(message, m.Exec):
            return
        command = " ".join(message.argv)
        proc = processes.RankProcess(["/bin/sh", "-c", command], self._env, echo_to=2)
        with self._lock:
            self._started.append(proc)
        code = proc.wait()  # this thread started it and must outlive it (the child dies with its thread)
        m.send(conn, m.Exit(code, proc.output_tail()))

    def stop(self) -> None:
        """Stop serving and kill whatever this agent started that is still running."""
        self._server.close()
        with self._lock:
            for proc in self._started:
                proc.kill()
        self._secrets.close()
