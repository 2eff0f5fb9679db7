"""Horovod contenders for bench/launch.py: sparkrunner's mpirun and Gloo launchers next to horovod.spark.run.

Each runs a Horovod no-op (`hvd.init()` and one allreduce) so the four are comparable; imported by
bench/launch.py when Horovod is installed, which times them in its one SparkSession.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any


def hvd_noop() -> int:
    import horovod.torch as hvd
    import torch

    hvd.init()
    return int(hvd.allreduce(torch.ones(1), op=hvd.Sum).item())


_HVD_NOOP_SCRIPT = "import horovod.torch as hvd, torch; hvd.init(); hvd.allreduce(torch.ones(1), op=hvd.Sum)"


def bare_mpirun(np: int) -> None:
    """The same Horovod no-op under a plain `mpirun -np N` on this machine: what MPI itself costs."""
    import subprocess

    cmd = ["mpirun", "--allow-run-as-root", "-np", str(np), "--bind-to", "none"]
    subprocess.run([*cmd, sys.executable, "-c", _HVD_NOOP_SCRIPT], check=True, capture_output=True)


def contenders(np: int, noop: Callable[[], Any]) -> Iterator[tuple[str, Callable[[], Any]]]:
    """(name, call) pairs; `noop` is unused: Horovod contenders all run `hvd_noop` instead."""
    import cloudpickle
    import horovod.spark

    from sparkrunner import Runner

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import bench/

    yield "bare mpirun -np 2 (hvd, no Spark)", lambda: bare_mpirun(np)
    yield "sparkrunner mpirun (hvd)", lambda: Runner(np=np, launcher="mpirun").run(hvd_noop)
    yield "sparkrunner direct+Gloo (hvd)", lambda: Runner(np=np, launcher="direct").run(hvd_noop)
    yield "horovod.spark.run MPI (hvd)", lambda: horovod.spark.run(hvd_noop, num_proc=np, use_mpi=True)
    yield "horovod.spark.run Gloo (hvd)", lambda: horovod.spark.run(hvd_noop, num_proc=np, use_gloo=True)
