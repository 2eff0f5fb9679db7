"""The end of a run with several ranks per task: `Runner(np=4, ranks_per_task=2)` on `local-cluster[2,1,1024]`
(2 barrier tasks x 2 ranks), launchers `direct` and `mpirun` (tests/matrix.py). Under mpirun task 0 waits for
one WAIT per other *task*; counting ranks made it wait out its 10 s grace at the end of every such run."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparkrunner import Runner
from tests.matrix import LAUNCHERS

pytestmark = pytest.mark.spark

_PROMPT_S = 3.0  # well under the 10 s task 0 waits for a WAIT that never comes


def last_moment() -> float:
    """The rank's own clock when it ends (a wall clock, comparable with the test's on this one machine)."""
    return time.time()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_run_ends_promptly_after_its_ranks(spark_cluster: Any, launcher: str) -> None:
    ends = Runner(np=4, ranks_per_task=2, launcher=launcher).run_all(last_moment)
    returned = time.time()
    assert len(ends) == 4
    assert returned - max(ends) < _PROMPT_S, (
        f"run() returned {returned - max(ends):.1f} s after the ranks ended"
    )
