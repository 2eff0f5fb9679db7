"""Per-framework environment wiring: each module turns a `Topology` into the variables its framework reads."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager

from sparkrunner.frameworks import horovod_env, jax_env, tf_env, torch_env
from sparkrunner.topology import Topology


def rank_environment(topology: Topology, index: int, gloo: bool = True) -> dict[str, str]:
    """Environment variables every framework needs for the rank at `index` (Horovod's Gloo ones with `gloo`)."""
    env = mpi_rank_environment(topology, index)
    if gloo:
        env.update(horovod_env.environment(topology, index))
    return env


def rank_defaults(env: Mapping[str, str], gloo: bool = True) -> dict[str, str]:
    """Framework settings sparkrunner chooses for a rank whose environment is `env`, unless `env` has them."""
    return {**tf_env.defaults(env), **(horovod_env.defaults() if gloo else {})}


def mpi_rank_environment(topology: Topology, index: int) -> dict[str, str]:
    """The per-rank variables a rank started by mpirun sets itself (Horovod talks MPI there, not Gloo)."""
    env = torch_env.environment(topology, index)
    env.update(tf_env.environment(topology, index))
    env.update(jax_env.environment(topology, index))
    return env


def task_services(topology: Topology, index: int, uses_horovod: bool | None) -> AbstractContextManager[None]:
    """Servers the process spawning rank `index` hosts while its rank runs (Horovod's Gloo rendezvous, see
    `horovod_env.hosts_rendezvous`)."""
    return horovod_env.rendezvous(topology, index, uses_horovod)
