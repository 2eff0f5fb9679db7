"""One outcome whatever the launcher: each fault of tests/scenarios/faults/chaos.py, on `direct` and `mpirun`,
np=2 on local-cluster[2,1,1024] (the shared session) and, where the fault needs no Spark, np=-2. The same error
type, the same cause in the message (the rank and what happened), within the same bound, and nothing left: rank
processes, `sparkrunner-*` temp folders, /dev/shm entries, the ranks' MASTER_PORT (tests/scenarios/faults/leftovers.py).

A SIGKILLed rank's wording, a SIGSTOPped rank past `timeout` with a long stop grace, a killed executor's wording
and a daemon left by a rank are checked in detail in test_launcher_parity.py; here they meet the common bound and
leftover scans."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.matrix import LAUNCHERS
from tests.scenarios.faults.chaos import EXPECTED, SPARK_ONLY, judge, run_with_fault
from tests.scenarios.faults.leftovers import Leftovers, use_private_temp_dir

pytestmark = pytest.mark.slow

SPARK_FAULTS = sorted(set(EXPECTED) - {"none", "slow", "checkpointed"})
LOCAL_FAULTS = ["raise", "exit", "hang", "gloo"]
"""np=-2 runs only the faults whose handling differs there from Spark's (the rest: test_launcher_parity.py)."""


@pytest.fixture(autouse=True)
def private_temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's temp dir is the test's own (restored afterwards): its listing is this run's only."""
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", ""))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    use_private_temp_dir(tmp_path / "tmp")


def run_folder(tmp_path: Path) -> Path:
    """Where the ranks of the test's run record what they did."""
    (tmp_path / "run").mkdir()
    return tmp_path / "run"


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("fault", SPARK_FAULTS)
def test_a_fault_in_spark_ends_the_same(fault: str, launcher: str, spark_cluster: Any, tmp_path: Path) -> None:
    before = Leftovers()
    outcome = run_with_fault(fault, launcher, 2, run_folder(tmp_path), spark_cluster)
    assert judge(fault, outcome) == []
    assert before.after(tmp_path / "run") == []


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("fault", LOCAL_FAULTS)
def test_a_fault_on_the_driver_ends_the_same(fault: str, launcher: str, tmp_path: Path) -> None:
    assert fault not in SPARK_ONLY
    before = Leftovers()
    outcome = run_with_fault(fault, launcher, -2, run_folder(tmp_path))
    assert judge(fault, outcome) == []
    assert before.after(tmp_path / "run") == []
