"""Per-framework environment wiring: each module turns a `Topology` into the variables its framework reads."""

from __future__ import annotations

from sparkrunner.frameworks import tf_env, torch_env
from sparkrunner.topology import Topology


def rank_environment(topology: Topology, index: int) -> dict[str, str]:
    """Environment variables every framework needs for the rank at `index`."""
    env: dict[str, str] = {}
    env.update(torch_env.environment(topology, index))
    env.update(tf_env.environment(topology, index))
    return env
