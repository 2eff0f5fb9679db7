"""Where the ranks of one run live: one `Peer` per task (or local slot), shared by every rank."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum


class PortSlot(IntEnum):
    """What each of a task's reserved ports is for (an index into `Peer.ports`); one owner per slot."""

    TORCH_MASTER = 0  # torch.distributed MASTER_PORT (task 0's)
    TF_WORKER = 1  # this task's TensorFlow worker in TF_CONFIG
    HOROVOD_RENDEZVOUS = 2  # Horovod's Gloo rendezvous server (task 0's)
    TASK_AGENT = 3  # the mpirun launcher's task agent
    RUN_END = 4  # task 0's run-end notice (mpirun launcher): other tasks wait on it, not in barrier()
    JAX_COORDINATOR = 5  # jax.distributed's coordinator service (task 0's, started by rank 0)


PORTS_PER_TASK = len(PortSlot)


@dataclass(frozen=True)
class Peer:
    """One task's host, the free ports it reserved for its rank, and the GPUs Spark gave it."""

    host: str
    ports: tuple[int, ...]
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class Topology:
    """All peers of a run, in task (and rank) order."""

    peers: tuple[Peer, ...]

    @property
    def size(self) -> int:
        return len(self.peers)

    def hosts(self) -> list[str]:
        """Distinct hosts in the order they first appear."""
        return list(dict.fromkeys(p.host for p in self.peers))

    def local_rank(self, index: int) -> int:
        host = self.peers[index].host
        return sum(1 for p in self.peers[:index] if p.host == host)

    def local_world_size(self, index: int) -> int:
        host = self.peers[index].host
        return sum(1 for p in self.peers if p.host == host)

    def in_host_order(self) -> Topology:
        """The peers as mpirun numbers its ranks: host by host (first-seen order), then by task order."""
        hosts = self.hosts()
        order = sorted(range(self.size), key=lambda i: (hosts.index(self.peers[i].host), i))
        return Topology(tuple(self.peers[i] for i in order))

    def to_json(self) -> str:
        return json.dumps([[p.host, list(p.ports), list(p.gpus)] for p in self.peers])

    @classmethod
    def from_json(cls, text: str) -> Topology:
        return cls(tuple(Peer(host, tuple(ports), tuple(gpus)) for host, ports, gpus in json.loads(text)))

    def cross_rank(self, index: int) -> int:
        """Index of this peer's host among all hosts (Horovod's cross rank)."""
        return self.hosts().index(self.peers[index].host)
