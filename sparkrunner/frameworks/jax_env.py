"""JAX wiring: `jax.distributed.initialize()` with no arguments finds the run's coordinator and ranks.

JAX reads the coordinator from JAX_COORDINATOR_ADDRESS, but takes the process count and id only from a cluster
it detects (Slurm, Open MPI, ...). The rank bootstrap therefore registers one more of JAX's `ClusterEnv`
subclasses, reading sparkrunner's RANK/WORLD_SIZE/LOCAL_RANK, at the moment JAX's own cluster registry is
imported: a rank that never imports JAX pays nothing. Under mpirun JAX's Open MPI cluster, found first, reads
the same numbers. The local process id becomes JAX's local device id, which is sparkrunner's GPU model
(entry LOCAL_RANK of CUDA_VISIBLE_DEVICES is the rank's own GPU).
"""

from __future__ import annotations

import os
from types import ModuleType

from sparkrunner.common.environment import Env
from sparkrunner.frameworks.after_import import after_import
from sparkrunner.topology import PortUse, Topology

COORDINATOR = "JAX_COORDINATOR_ADDRESS"
_BIND = "JAX_COORDINATOR_BIND_ADDRESS"
_REGISTRY = "jax._src.clusters"


def environment(topology: Topology, index: int) -> dict[str, str]:
    """The coordinator every rank of the run dials: rank 0's host, on task 0's reserved port; rank 0 listens
    on that address only (JAX's default is every interface)."""
    host = topology.peers[0].host
    address = f"[{host}]" if ":" in host else host
    coordinator = f"{address}:{topology.peers[0].ports[PortUse.JAX_COORDINATOR]}"
    return {COORDINATOR: coordinator, _BIND: coordinator}


def register_on_import() -> None:
    """In the rank: have JAX detect sparkrunner's run as a cluster once (and if) it imports its registry."""
    after_import(_REGISTRY, _register)


def _register(registry: ModuleType) -> None:
    """Define (so register) JAX's view of a sparkrunner rank, once."""
    if any(getattr(c, "name", None) == "sparkrunner" for c in registry.ClusterEnv._cluster_types):
        return

    class SparkRunnerCluster(registry.ClusterEnv):  # type: ignore[name-defined]
        name = "sparkrunner"

        @classmethod
        def is_env_present(cls) -> bool:
            return Env.RUN_ID in os.environ and COORDINATOR in os.environ

        @classmethod
        def get_coordinator_address(
            cls, timeout_secs: int | None, override_coordinator_port: str | None
        ) -> str:
            return os.environ[COORDINATOR]

        @classmethod
        def get_process_count(cls) -> int:
            return int(os.environ["WORLD_SIZE"])

        @classmethod
        def get_process_id(cls) -> int:
            return int(os.environ["RANK"])

        @classmethod
        def get_local_process_id(cls) -> int | None:
            return int(os.environ["LOCAL_RANK"])
