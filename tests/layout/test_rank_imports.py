"""A real rank process loads no driver-side or Spark-task code, whichever launcher started it.

The oracle is the rank's own `sys.modules`, read inside the rank after it used the rank-side API and the data
path's rank half; the static check of the same rule is `test_module_graph.py`.
"""

from __future__ import annotations

import sys

import pytest

from sparkrunner import Runner

NOT_IN_A_RANK = (
    "sparkrunner.driver",
    "sparkrunner.placement",
    "sparkrunner.observe",
    "sparkrunner.compat",
    "sparkrunner.runner",
    "sparkrunner.cli",
    "sparkrunner.check",
    "sparkrunner.tasks",
    "sparkrunner.data.driver",
    "sparkrunner.data.tasks",
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
    assert len(per_rank) == 2 and all("sparkrunner.ranks.output_relay" in mods for mods in per_rank), per_rank
    assert all("sparkrunner.data.ranks.torch_adapter" in mods for mods in per_rank), (
        "the loaders were not loaded"
    )
    wrong = {m for mods in per_rank for m in mods if m.startswith(NOT_IN_A_RANK)}
    assert not wrong, f"a rank loaded driver or task code: {sorted(wrong)}"
