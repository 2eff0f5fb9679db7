"""``launcher="auto"`` (`sparkrunner.driver.launcher_choice.auto`) on real runs: direct for code without MPI (a torch function, a script), mpirun for mpi4py
code, on the driver (np<0) and in a Spark barrier stage; the run's log line and `last_run.launcher` say which
and why. Which launcher really started the ranks is read in the ranks: mpirun sets ``OMPI_COMM_WORLD_SIZE``.
Horovod code: tests/frameworks/horovod/test_horovod_local.py and test_horovod_spark.py."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from tests.matrix import Placement

pytestmark = pytest.mark.slow


def torch_ranks() -> dict[str, Any]:
    """Plain torch.distributed (Gloo): no MPI anywhere."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    dist.destroy_process_group()
    return {"size": int(total.item()), "under_mpirun": "OMPI_COMM_WORLD_SIZE" in os.environ}


def mpi4py_ranks() -> dict[str, Any]:
    """An MPI program: its world is only right when mpirun started the ranks."""
    from mpi4py import MPI

    return {"size": MPI.COMM_WORLD.Get_size(), "under_mpirun": "OMPI_COMM_WORLD_SIZE" in os.environ}


SCRIPT = """
import json, os, sys
import torch
with open(os.path.join(sys.argv[1], f"rank{os.environ['RANK']}.json"), "w") as out:
    json.dump({"under_mpirun": "OMPI_COMM_WORLD_SIZE" in os.environ, "torch": torch.__version__}, out)
"""


def picked(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("launcher='auto' picked")]


def test_a_torch_function_runs_under_direct(placement: Placement, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sparkrunner")
    runner = Runner(np=placement.np(2), spark=placement.spark, tracking=False, timeout=120)
    assert runner.run(torch_ranks) == {"size": 2, "under_mpirun": False}
    assert runner.last_run is not None and runner.last_run.launcher == "direct"
    assert picked(caplog) == [
        "launcher='auto' picked direct: the code imports neither Horovod nor mpi4py, so it needs no MPI"
    ]


def test_a_script_runs_under_direct(
    placement: Placement, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sparkrunner")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    runner = Runner(np=placement.np(2), spark=placement.spark, tracking=False, timeout=120)
    runner.run_script(script, str(tmp_path))
    assert [(tmp_path / f"rank{r}.json").read_text().count('"under_mpirun": false') for r in (0, 1)] == [1, 1]
    assert runner.last_run is not None and runner.last_run.launcher == "direct"
    assert "needs no MPI" in picked(caplog)[0]


def test_mpi4py_code_runs_under_mpirun(placement: Placement, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("mpi4py")
    caplog.set_level(logging.INFO, logger="sparkrunner")
    runner = Runner(np=placement.np(2), spark=placement.spark, tracking=False, timeout=120)
    assert runner.run(mpi4py_ranks) == {"size": 2, "under_mpirun": True}
    assert runner.last_run is not None and runner.last_run.launcher == "mpirun"
    assert picked(caplog) == ["launcher='auto' picked mpirun: the code imports mpi4py"]
