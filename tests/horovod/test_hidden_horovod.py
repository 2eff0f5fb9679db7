"""Horovod reached only through the user's own module (the shape of Horovod's own test_torch.py, see
hvd_suite) works with no ``horovod=`` argument on both launchers (np<0): the direct launcher hosts the Gloo
rendezvous whenever Horovod is installed. With ``horovod=False`` the rank aborts in ``hvd.init()`` and the
driver's error quotes Horovod's line and names the fix."""

from __future__ import annotations

import re

import pytest

from sparkrunner import Runner
from sparkrunner.errors import RankProcessDiedError
from tests.matrix import LAUNCHERS


def users_code() -> tuple[int, int, int]:
    """Nothing here names Horovod: the suite module imports it (ranks import `tests` from the driver's cwd)."""
    from tests.horovod import hvd_suite

    return hvd_suite.run_suite()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_horovod_in_the_users_own_module_needs_no_argument(launcher: str) -> None:
    outcomes = Runner(np=-2, launcher=launcher, tracking=False, progress=False).run_all(users_code)
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
