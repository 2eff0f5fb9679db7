"""A real rank process loads no driver-side or Spark-task code (not even the driver's option declarations,
`sparkrunner.options`), whichever launcher started it and wherever it was placed.

The oracle is the rank's own `sys.modules`, read inside the rank after it used the rank-side API and the data
path's rank half; the static check of the same rule is `test_module_graph.py`.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from sparkrunner import Runner

NOT_IN_A_RANK = (
    "sparkrunner.options",
    "sparkrunner.driver",
    "sparkrunner.placement",
    "sparkrunner.observe",
    "sparkrunner.compat",
    "sparkrunner.runner",
    "sparkrunner.cli",
    "sparkrunner.check",
    "sparkrunner.tasks",
    "sparkrunner.data.driver",
    "sparkrunner.data.workers",
    "sparkrunner.ml.workers",
)


def loaded_sparkrunner_modules() -> list[str]:
    import sparkrunner
    from sparkrunner.data import NumpyLoader, TorchLoader  # noqa: F401  (the rank half of the data path)

    sparkrunner.report_progress(step=1, total=1)
    sparkrunner.log_to_driver(
        f"rank {sparkrunner.rank_context().rank} of {sparkrunner.rank_context().world_size}"
    )
    return sorted(name for name in sys.modules if name.startswith("sparkrunner"))


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["direct", "mpirun"])
def test_a_rank_loads_no_driver_or_task_module(launcher: str) -> None:
    """np < 0, both launchers: every rank's modules, after the rank-side API and the data loaders were used."""
    per_rank = Runner(np=-2, launcher=launcher, tracking=False).run_all(loaded_sparkrunner_modules)
    assert_rank_side_only(per_rank)


@pytest.mark.slow
def test_a_rank_placed_by_spark_loads_no_driver_or_task_module(spark_local: Any) -> None:
    """np > 0, launcher="direct": the ranks of a barrier stage, whose task (not the rank) runs the task code."""
    per_rank = Runner(np=2, launcher="direct", tracking=False).run_all(loaded_sparkrunner_modules)
    assert_rank_side_only(per_rank)


def assert_rank_side_only(per_rank: list[list[str]]) -> None:
    """Both ranks used the rank-side API and the loaders, and neither loaded a module of `NOT_IN_A_RANK`."""
    assert len(per_rank) == 2 and all("sparkrunner.ranks.output_relay" in mods for mods in per_rank), per_rank
    assert all("sparkrunner.data.ranks.torch_adapter" in mods for mods in per_rank), (
        "the loaders were not loaded"
    )
    wrong = {m for mods in per_rank for m in mods if m.startswith(NOT_IN_A_RANK)}
    assert not wrong, f"a rank loaded driver or task code: {sorted(wrong)}"
