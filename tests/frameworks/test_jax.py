"""JAX multi-process on CPU: `jax.distributed.initialize()` with no arguments on every rank, a psum across
processes, on every launcher and placement."""

from __future__ import annotations

import pytest

from sparkrunner import Runner
from tests.matrix import Placement

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def psum_of_ranks() -> dict[str, int | float]:
    """One rank: join the run's JAX cluster and sum rank + 1 over every process's device."""
    import os

    import jax
    import jax.numpy as jnp

    jax.distributed.initialize()
    total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.array([jax.process_index() + 1.0]))
    view = {
        "rank": int(os.environ["RANK"]),
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "devices": jax.device_count(),
        "psum": float(total[0]),
    }
    jax.distributed.shutdown()
    return view


def test_initialize_without_arguments_and_psum(placement: Placement, launcher: str) -> None:
    views = Runner(np=placement.np(2), launcher=launcher, tracking=False).run_all(psum_of_ranks)
    world = len(views)
    for view in views:
        assert view["process_index"] == view["rank"], view
        assert view["process_count"] == view["devices"] == world, view
        assert view["psum"] == sum(r + 1 for r in range(world)), view
