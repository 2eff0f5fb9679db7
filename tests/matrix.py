"""The launcher x placement matrix every behaviour test names explicitly (never launcher="auto")."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

import pytest

from sparkrunner.frameworks.horovod_build import horovod_has_mpi


def _mpirun_missing() -> str | None:
    if shutil.which("mpirun") is None:
        return "launcher='mpirun' needs Open MPI's mpirun (apt-get install openmpi-bin)"
    if not horovod_has_mpi():
        return "launcher='mpirun' needs Horovod built with MPI (scripts/setup.sh builds it)"
    return None


_WHY_NO_MPIRUN = _mpirun_missing()

LAUNCHERS = [
    pytest.param("direct", id="direct"),
    pytest.param(
        "mpirun",
        id="mpirun",
        marks=pytest.mark.skipif(_WHY_NO_MPIRUN is not None, reason=_WHY_NO_MPIRUN or ""),
    ),
]

MPIRUN = LAUNCHERS[1:]
"""mpirun alone, for a test whose direct cell is another test (which says so)."""

RUNNABLE_LAUNCHERS: tuple[str, ...] = ("direct", *(("mpirun",) if _WHY_NO_MPIRUN is None else ()))
"""The launchers that can run here, for tests that draw one per run rather than parametrize."""


@dataclass(frozen=True)
class Placement:
    """Where a test's ranks run: on the driver (np < 0) or in a barrier stage of `spark` (np > 0)."""

    name: str
    spark: Any = None

    def np(self, ranks: int) -> int:
        return ranks if self.spark is not None else -ranks


PLACEMENTS = [pytest.param("np<0", id="np<0"), pytest.param("spark", id="spark", marks=pytest.mark.spark)]
