"""The rank-side API (`sparkrunner/ranks/api.py`): `rank_context()` and `in_run()` inside a real rank, np < 0,
on each launcher (under mpirun the rank reads Open MPI's variables), and outside any run."""

from __future__ import annotations

import os
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.ranks.api import RankContext, in_run, rank_context
from tests.matrix import LAUNCHERS

_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def seen_by_the_rank() -> dict[str, Any]:
    ctx = rank_context()
    mpi = {k: os.environ.get(k) for k in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")}
    return {
        "context": (ctx.rank, ctx.world_size, ctx.local_rank, ctx.local_world_size),
        "in_run": in_run(),
        **mpi,
    }


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_rank_knows_its_place_in_the_run(launcher: str) -> None:
    """np=-2: ranks 0 and 1 of 2, both on this machine; under mpirun the same numbers as Open MPI's own."""
    seen = Runner(np=-2, launcher=launcher, tracking=False).run_all(seen_by_the_rank)
    assert [s["context"] for s in seen] == [(0, 2, 0, 2), (1, 2, 1, 2)]
    assert all(s["in_run"] for s in seen)
    if launcher == "mpirun":
        assert [(s["OMPI_COMM_WORLD_RANK"], s["OMPI_COMM_WORLD_SIZE"]) for s in seen] == [
            ("0", "2"),
            ("1", "2"),
        ]


def test_outside_a_run_the_process_is_rank_0_of_1(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert rank_context() == RankContext(rank=0, world_size=1, local_rank=0, local_world_size=1, attempt=0)
    assert not in_run()
