"""Horovod reached only through the user's own module (the shape of Horovod's own test_torch.py, see
hvd_suite, shipped by value with the function) works with no ``horovod=`` argument on both placements: the direct
launcher hosts the Gloo rendezvous whenever Horovod is installed (mpirun needs none). With ``horovod=False`` the rank aborts in ``hvd.init()`` and the
driver's error quotes Horovod's line and names the fix."""

from __future__ import annotations

import re

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankProcessDiedError
from tests.frameworks.horovod import hvd_suite
from tests.matrix import Placement


def users_code() -> tuple[int, int, int]:
    """Nothing here names Horovod: the suite module, shipped by value with this function, imports it."""
    return hvd_suite.run_suite()


@pytest.mark.slow
def test_horovod_in_the_users_own_module_needs_no_argument(placement: Placement) -> None:
    """Launcher direct, which hosts the Gloo rendezvous in the local slot (np<0) or in barrier task 0 (Spark);
    under mpirun Horovod takes MPI's controller and no rendezvous, whatever the code names (the path
    tests/frameworks/horovod/test_horovod_local.py and test_horovod_spark.py run with it)."""
    runner = Runner(
        np=placement.np(2), spark=placement.spark, launcher="direct", tracking=False, progress=False
    )
    outcomes = runner.run_all(users_code)
    assert outcomes == [(1, 0, 2), (1, 0, 2)]  # each rank ran the one test, it passed, Horovod saw both


@pytest.mark.slow
def test_a_missed_rendezvous_quotes_horovod_and_names_the_fix() -> None:
    runner = Runner(np=-2, launcher="direct", tracking=False, progress=False, horovod=False)
    with pytest.raises(RankProcessDiedError) as failed:
        runner.run(users_code)
    message = str(failed.value)
    assert "SIGABRT" in message
    assert re.search(r'Horovod said: "HTTP \w+ request failed', message), message
    assert "Runner(horovod=True)" in message
