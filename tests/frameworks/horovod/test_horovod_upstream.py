"""Horovod's own test/parallel/test_torch.py, run by ``pytest.main`` inside the function with no ``horovod=``
argument, on both launchers and both placements, gives every test the outcome it has under bare
``mpirun -np 2 python -m pytest`` (the oracle), except the Gloo-only tests, which run and pass under the direct
launcher (Gloo) where bare mpirun (MPI) skips them. CI runs the named subset in upstream_torch.SUBSET; with
SPARKRUNNER_UPSTREAM_TESTS set, the whole file."""

from __future__ import annotations

import logging

import pytest

from sparkrunner import Runner
from tests.frameworks.horovod import upstream_torch as upstream
from tests.matrix import Placement

log = logging.getLogger("sparkrunner")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(3600),  # the whole file takes ~5 min per run here; the subset ~1 min
    pytest.mark.skipif(
        not upstream.TEST_FILE.exists(),
        reason=f"Horovod's test_torch.py is not at {upstream.TEST_FILE} (scripts/fetch_upstream_tests.sh)",
    ),
]

_RUN_TIMEOUT_S = 1500.0


@pytest.fixture(scope="module")
def bare_mpirun() -> list[dict[str, str]]:
    """Each rank's per-test outcomes under bare ``mpirun -np 2 python -m pytest`` (the oracle)."""
    reports = upstream.run_bare_mpirun(upstream.selection(), _RUN_TIMEOUT_S)
    results = [upstream.outcomes(report) for report in reports]
    log.info("bare mpirun: (passed, failed, skipped) per rank %s", [upstream.counts(r) for r in results])
    return results


def expected_under(launcher: str, bare: dict[str, str]) -> dict[str, str]:
    """Bare mpirun's outcomes, with the Gloo-only tests passing under the direct launcher (Horovod on Gloo)."""
    gloo = {name: "passed" for name in upstream.GLOO_ONLY & bare.keys()} if launcher == "direct" else {}
    return {**bare, **gloo}


def test_horovods_own_suite_as_under_bare_mpirun(
    placement: Placement, launcher: str, bare_mpirun: list[dict[str, str]]
) -> None:
    runner = Runner(
        np=placement.np(2),
        spark=placement.spark,
        launcher=launcher,
        tracking=False,
        progress=False,
        timeout=_RUN_TIMEOUT_S,
    )
    reports = runner.run_all(upstream.run_in_rank, str(upstream.TEST_FILE), upstream.selection())
    results = [upstream.outcomes(report) for report in reports]
    log.info(
        "%s %s: (passed, failed, skipped) per rank %s",
        placement.name,
        launcher,
        [upstream.counts(r) for r in results],
    )
    assert len(results[0]) >= len(upstream.selection())  # every named test ran (the whole file: 115)
    assert results == [expected_under(launcher, bare) for bare in bare_mpirun]
