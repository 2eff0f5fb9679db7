"""The chaos soak, CI-sized: `RUNS` seeded runs of np=2 on local-cluster[2,1,1024] (the shared session), each
with a fault drawn from tests/scenarios/faults/soak.py's list on either launcher; every run ends as expected
within its bound and leaves nothing, and afterwards the driver's threads and RSS are back. `bench/soak.py` runs
the same with 200 runs and on the two-host fixture too."""

from __future__ import annotations

from typing import Any

import pytest

from tests.matrix import RUNNABLE_LAUNCHERS
from tests.scenarios.faults.soak import SOAK_FAULTS, Soak

pytestmark = pytest.mark.slow

RUNS = 12
"""Every fault of the soak at least once (`Soak.plan`), four of them twice."""
SEED = 31


def test_a_seeded_soak_ends_every_run_as_expected(spark_cluster: Any, private_temp_dir: Any) -> None:
    soak = Soak(spark_cluster, RUNS, SEED, launchers=RUNNABLE_LAUNCHERS)
    soak.one("none", "direct", -1)  # the warm-up: the pools a first run starts belong to the baseline
    soak.table.clear()
    soak.run()
    print(soak.report(f"soak: {RUNS} runs, seed {SEED}"))
    assert soak.passed, soak.report("soak")
    assert {fault for fault, _ in soak.table} == set(SOAK_FAULTS)


ONE_DRIVER_SEED = 6
"""Draws a quick fault: rank 1 SIGKILLed on the driver's machine."""


def test_the_one_driver_soak_samples_the_footprint_after_each_operation(
    spark_cluster: Any, private_temp_dir: Any
) -> None:
    """`bench/soak.py --one-driver`, two operations in the shared session (an np=-2 run with a fault, a scoring of
    a model of its own; np=2 runs are the test above's): each ends as expected, and a sample of every quantity
    follows each. Keeps the bench running; its figures come from 200 operations."""
    from bench.footprint import BOUNDS
    from bench.soak import OneDriver

    soak = OneDriver(spark_cluster, ["local", "score"], ONE_DRIVER_SEED)
    soak.run(every=1)
    assert not soak.failures and all(s.passed for s in soak.soaks.values()), soak.report(warm_up=1)
    assert [(n, set(s)) for n, s in soak.rows] == [(n, set(BOUNDS)) for n in range(3)]
