"""Placements and launchers every diagnostics test runs under (named in each test id)."""

from __future__ import annotations

import pytest

LAUNCHERS = ["direct", "mpirun"]


@pytest.fixture(params=["np-2-on-driver", "spark"])
def np2(request: pytest.FixtureRequest) -> int:
    """2 ranks: on the driver (np=-2), or in a barrier stage on local-cluster[2,1,1024] (np=2)."""
    if request.param == "spark":
        request.getfixturevalue("spark_cluster")
        return 2
    return -2


def timeout_for(np: int) -> float:
    """Long enough for every rank to start and settle (Spark executors start slower on a busy machine)."""
    return 25.0 if np > 0 else 10.0
