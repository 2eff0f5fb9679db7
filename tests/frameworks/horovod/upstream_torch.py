"""Horovod's own test/parallel/test_torch.py, run by ``pytest.main`` inside a sparkrunner rank and by bare
``mpirun -np 2 python -m pytest``, each giving every rank's per-test outcomes from its JUnit report.

The file is not part of this repository and not in any PyPI artifact (Horovod's sdist ships no test/ folder):
scripts/fetch_upstream_tests.sh puts it, with the test/utils/common.py it imports, under
``$SPARKRUNNER_UPSTREAM_TESTS/horovod`` (default ``~/.cache/sparkrunner/upstream-tests``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.compat.upstream import UPSTREAM

TEST_FILE = UPSTREAM / "horovod" / "test_torch.py"
ORIGIN = "horovod/horovod@v0.28.1 (1d217b59949986d025f6db93c49943fb6b6cc78f):test/parallel/test_torch.py"

SUBSET = (
    "test_gpu_required",  # skips without a GPU, under every launcher
    "test_horovod_reinit",  # Gloo only: runs under the direct launcher, skips under bare mpirun
    "test_horovod_rank",
    "test_horovod_size",
    "test_horovod_allreduce",
    "test_horovod_allreduce_grad",
    "test_horovod_allreduce_process_sets",
    "test_horovod_allgather_variable_size",
    "test_horovod_broadcast",
    "test_horovod_alltoall",
    "test_horovod_reducescatter",
    "test_broadcast_object",
)
"""The named tests CI runs (~1 s each): every collective, process sets, a Gloo-only and a GPU-only test.
The whole file (115 tests, ~5 min per cell here) runs when SPARKRUNNER_UPSTREAM_TESTS is set."""

GLOO_ONLY = {"test_horovod_reinit", "test_horovod_is_initialized"}
"""Tests that skip with "Gloo is not available" unless Horovod runs its Gloo controller (the direct launcher)."""


def selection() -> tuple[str, ...]:
    """The test names to run; empty means the whole file (opt-in)."""
    return () if "SPARKRUNNER_UPSTREAM_TESTS" in os.environ else SUBSET


def pytest_args(test_file: str, names: tuple[str, ...], work: str, report: str) -> list[str]:
    """pytest's arguments for the file (or its named tests): a JUnit report, and no project config (an empty
    pytest.ini in `work`)."""
    ini = Path(work, "pytest.ini")
    ini.write_text("[pytest]\n")
    targets = [f"{test_file}::TorchTests::{name}" for name in names] or [test_file]
    return [
        "-q",
        "-p",
        "no:cacheprovider",
        "-c",
        str(ini),
        f"--rootdir={work}",
        f"--junitxml={report}",
        *targets,
    ]


def run_in_rank(test_file: str, names: tuple[str, ...]) -> str:
    """In a rank: run the file under ``pytest.main`` and return the JUnit report's text. Names no Horovod."""
    import pytest

    with tempfile.TemporaryDirectory() as work:
        report = os.path.join(work, "report.xml")
        pytest.main(pytest_args(test_file, names, work, report))
        return Path(report).read_text()


def run_bare_mpirun(names: tuple[str, ...], timeout_s: float) -> list[str]:
    """``mpirun -np 2 python -m pytest`` on the file: each rank's JUnit report's text, in rank order."""
    with tempfile.TemporaryDirectory() as work:
        reports = [os.path.join(work, f"rank{rank}", "report.xml") for rank in range(2)]
        for report in reports:
            os.makedirs(os.path.dirname(report))
        report = os.path.join(work, "rank$OMPI_COMM_WORLD_RANK", "report.xml")  # sh expands the rank
        rank_command = " ".join(
            shlex.quote(arg) if "$" not in arg else f'"{arg}"'
            for arg in [sys.executable, "-m", "pytest", *pytest_args(str(TEST_FILE), names, work, report)]
        )
        subprocess.run(
            [
                "mpirun",
                "--allow-run-as-root",
                "--oversubscribe",
                "-np",
                "2",
                "-x",
                "PATH",
                "sh",
                "-c",
                rank_command,
            ],
            capture_output=True,
            timeout=timeout_s,
            check=False,  # a failing test fails pytest; the reports say which
        )
        return [Path(report).read_text() for report in reports]


def outcomes(report: str) -> dict[str, str]:
    """Each test's outcome in a JUnit report: passed, failed or skipped."""
    results = {}
    for case in ET.fromstring(report).iter("testcase"):
        kinds = {child.tag for child in case}
        results[case.get("name", "")] = (
            "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        )
    return results


def counts(results: dict[str, str]) -> tuple[int, int, int]:
    """(passed, failed, skipped)."""
    values = list(results.values())
    return values.count("passed"), values.count("failed"), values.count("skipped")
