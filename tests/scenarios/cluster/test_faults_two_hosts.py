"""A fault of the soak's (tests/scenarios/faults/chaos.py) on the two-host fixture, where its wording differs from
one host: an executor JVM killed on the host that did not run mpirun. mpirun then loses its daemon there and ends
with exit code 255, before Spark says that the executor was lost; the error must name the lost executor, as on
one host and under `direct`, not mpirun's exit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.matrix import RUNNABLE_LAUNCHERS
from tests.scenarios.cluster.fixtures import TwoHosts
from tests.scenarios.faults.chaos import judge, run_with_fault
from tests.scenarios.faults.leftovers import Leftovers

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.usefixtures("private_temp_dir"),
    pytest.mark.skipif("mpirun" not in RUNNABLE_LAUNCHERS, reason="needs mpirun and Horovod built with MPI"),
]


def test_an_executor_killed_on_the_other_host_is_named_under_mpirun(
    two_hosts: TwoHosts, tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    before = Leftovers()
    outcome = run_with_fault("executor", "mpirun", 2, folder, two_hosts.spark, cluster=two_hosts.cluster)
    assert judge("executor", outcome, in_spark=True) == []
    assert before.after(folder) == []
