"""Where the ranks of one run live: one `Peer` per rank (a barrier task holds `ranks_per_task` of them).

A rank index and a task index are different numbers as soon as a task holds more than one rank: they have their
own types (`RankIndex`, `TaskIndex`) so that one is never passed for the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NewType

from sparkrunner.errors import InvalidArgumentError

RankIndex = NewType("RankIndex", int)  # a rank's place in the world (0 .. world size - 1)
TaskIndex = NewType(
    "TaskIndex", int
)  # a barrier task's partition id (np < 0: the index of the local group that holds the rank)


class PortUse(IntEnum):
    """What each of a rank's reserved ports is for (an index into `Peer.ports`); one owner per use."""

    TORCH_MASTER = 0  # torch.distributed MASTER_PORT (task 0's)
    TF_WORKER = 1  # this task's TensorFlow worker in TF_CONFIG
    HOROVOD_RENDEZVOUS = 2  # Horovod's Gloo rendezvous server (task 0's)
    TASK_AGENT = 3  # the mpirun launcher's task agent
    RUN_END = 4  # task 0's run-end notice (mpirun launcher): other tasks wait on it, not in barrier()
    JAX_COORDINATOR = 5  # jax.distributed's coordinator service (task 0's, started by rank 0)


PORTS_PER_RANK = len(PortUse)  # each rank reserves one port per use


@dataclass(frozen=True)
class Peer:
    """One rank's host, the free ports its task reserved for it, its GPUs, and the barrier task that holds it."""

    host: str
    ports: tuple[int, ...]
    gpus: tuple[str, ...] = ()
    task: TaskIndex = TaskIndex(0)


@dataclass(frozen=True)
class Topology:
    """All peers of a run, one per rank, in rank order (task by task)."""

    peers: tuple[Peer, ...]

    @property
    def size(self) -> int:
        """The number of ranks."""
        return len(self.peers)

    @property
    def num_tasks(self) -> int:
        """The number of barrier tasks (local groups, np < 0) that hold the ranks."""
        return len({p.task for p in self.peers})

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
        import json  # (here: a rank's start does not need it)

        return json.dumps([[p.host, list(p.ports), list(p.gpus), p.task] for p in self.peers])

    @classmethod
    def from_json(cls, text: str) -> Topology:
        import json

        peers = json.loads(text)
        return cls(
            tuple(Peer(h, tuple(ports), tuple(gpus), TaskIndex(task)) for h, ports, gpus, task in peers)
        )

    def cross_rank(self, index: int) -> int:
        """Index of this peer's host among all hosts (Horovod's cross rank)."""
        return self.hosts().index(self.peers[index].host)


def ranks_per_task(np: int, requested: int | None, gpus_per_task: float) -> int:
    """How many ranks each barrier task starts: `requested`, else one per GPU Spark gives each task
    (`gpus_per_task`) when it gives more than one, else 1; a run on the driver (np < 0) has no tasks: 1."""
    if np < 0:
        return 1
    if requested is not None:
        return requested
    if gpus_per_task <= 1 or not gpus_per_task.is_integer():
        return 1
    gpus = int(gpus_per_task)
    if np % gpus:
        raise InvalidArgumentError(
            f"each task has {gpus} GPUs, so each starts {gpus} ranks by default, but np={np} is not "
            f"a multiple of {gpus}; pass ranks_per_task=... explicitly"
        )
    return gpus
