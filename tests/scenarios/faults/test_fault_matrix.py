"""One outcome whatever the launcher: each fault of tests/scenarios/faults/chaos.py, on `direct` and `mpirun`,
np=2 on local-cluster[2,1,1024] (the shared session) and, where the fault needs no Spark, np=-2. The same error
type, the same cause in the message (the rank and what happened), within the same bound, and nothing left: rank
processes, `sparkrunner-*` temp folders, /dev/shm entries, the ranks' MASTER_PORT (tests/scenarios/faults/leftovers.py).

A SIGSTOPped rank runs with a stop grace far longer than the run (`LONG_GRACE_S`): the grace must not be spent on
a process that cannot act on SIGTERM. A daemon left by a rank: test_launcher_parity.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.matrix import LAUNCHERS
from tests.scenarios.faults.chaos import SPARK_ONLY, judge, run_with_fault
from tests.scenarios.faults.leftovers import Leftovers

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("private_temp_dir")]

SPARK_FAULTS = ["raise", "exit", "sigkill", "sigstop", "hang", "gloo", "cancel", "executor"]
"""Every fault that makes a run fail; the killed executor last: later runs wait for its worker to replace it."""
LOCAL_FAULTS = ["raise", "exit"]
"""np=-2 runs the faults whose wording there comes from another path than in Spark (the placement's own exit
codes); a SIGKILLed or SIGSTOPped rank there: test_launcher_parity.py."""


def run_folder(tmp_path: Path) -> Path:
    """Where the ranks of the test's run record what they did."""
    (tmp_path / "run").mkdir()
    return tmp_path / "run"


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("fault", SPARK_FAULTS)
def test_a_fault_in_spark_ends_the_same(
    fault: str, launcher: str, spark_cluster: Any, tmp_path: Path
) -> None:
    before = Leftovers()
    outcome = run_with_fault(fault, launcher, 2, run_folder(tmp_path), spark_cluster)
    assert judge(fault, outcome, in_spark=True) == []
    assert before.after(tmp_path / "run") == []


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("fault", LOCAL_FAULTS)
def test_a_fault_on_the_driver_ends_the_same(fault: str, launcher: str, tmp_path: Path) -> None:
    assert fault not in SPARK_ONLY
    before = Leftovers()
    outcome = run_with_fault(fault, launcher, -2, run_folder(tmp_path))
    assert judge(fault, outcome, in_spark=False) == []
    assert before.after(tmp_path / "run") == []
