"""Drop-in for ``horovod.spark.run``, built on `sparkrunner.Runner`: every rank's value, in rank order; and for
Horovod's Spark ML estimators, ``TorchEstimator``/``TorchModel`` and ``KerasEstimator``/``KerasModel``
(`sparkrunner.compat.horovod_estimators`, imported on first use).

``from sparkrunner.compat import horovod_spark; horovod_spark.run(fn, args=(...), num_proc=4)``.
``use_gloo=True`` starts the ranks with the direct launcher and Horovod's Gloo rendezvous, ``use_mpi=True``
with mpirun; neither: mpirun where Horovod has MPI and mpirun is installed, else Gloo (Horovod's own order).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from typing import IO, TYPE_CHECKING, Any

from sparkrunner.common.lazy_exports import lazy_exports
from sparkrunner.compat.spark_facts import positive_int
from sparkrunner.errors import InvalidArgumentError, SparkRunnerWarning
from sparkrunner.launch.driver.auto import mpirun_unavailable
from sparkrunner.options import LauncherName
from sparkrunner.placement.sessions import find_spark_session, is_connect_session
from sparkrunner.timeouts import START_TIMEOUT_S

if TYPE_CHECKING:
    from sparkrunner.compat.horovod_estimators import KerasEstimator, KerasModel, TorchEstimator, TorchModel

log = logging.getLogger(__name__)

_LAZY = {
    "TorchEstimator": "sparkrunner.compat.horovod_estimators",
    "TorchModel": "sparkrunner.compat.horovod_estimators",
    "KerasEstimator": "sparkrunner.compat.horovod_estimators",
    "KerasModel": "sparkrunner.compat.horovod_estimators",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = ["KerasEstimator", "KerasModel", "TorchEstimator", "TorchModel", "run"]


def run(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    num_proc: int | None = None,
    start_timeout: float | None = None,
    use_mpi: bool | None = None,
    use_gloo: bool | None = None,
    extra_mpi_args: str | None = None,
    env: Mapping[str, str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    verbose: int = 1,
    nics: Sequence[str] | None = None,
) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on `num_proc` ranks in one Spark barrier stage; every rank's value, in order.

    Args:
        num_proc: ranks; default ``spark.default.parallelism``.
        start_timeout: seconds for every rank to start; default ``HOROVOD_SPARK_START_TIMEOUT``, else 600.
        extra_mpi_args: not passed on (sparkrunner builds its own mpirun command); a warning says so.
        env: extra environment variables for every rank.
        stdout, stderr: where the ranks' output is shown on the driver (default: sys.stdout / sys.stderr).
        verbose: 0 keeps the "Running N processes" line quiet.
        nics: the network interface(s) Horovod's Gloo and NCCL use.
        use_mpi, use_gloo: the launcher (see the module docstring).
    """
    from sparkrunner.runner import Runner

    spark = find_spark_session()
    processes = _num_proc(spark, num_proc)
    launcher = _launcher(use_mpi, use_gloo)
    if extra_mpi_args:
        warnings.warn(
            f"extra_mpi_args={extra_mpi_args!r} is not passed on: sparkrunner builds its own mpirun command "
            f"(set MCA parameters as OMPI_MCA_* variables in env=... instead)",
            SparkRunnerWarning,
            stacklevel=2,
        )
    if verbose >= 1:
        log.info("Running %d processes (launcher %s)...", processes, launcher)
    runner = Runner(
        processes,
        spark=spark,
        launcher=launcher,
        horovod=True,
        start_timeout=_start_timeout(start_timeout),
        env={**(env or {}), **_nic_env(nics)},
    )
    with redirect_stdout(stdout or sys.stdout), redirect_stderr(stderr or sys.stderr):
        return runner.run_all(fn, *args, **(kwargs or {}))


def _num_proc(spark: Any, num_proc: int | None) -> int:
    if num_proc is not None:
        return positive_int("num_proc", num_proc)
    if is_connect_session(spark):
        raise InvalidArgumentError(
            "num_proc=None means spark.default.parallelism, which a Spark Connect session does not expose: "
            "pass num_proc=..."
        )
    return int(spark.sparkContext.defaultParallelism)


def _launcher(use_mpi: bool | None, use_gloo: bool | None) -> LauncherName:
    """Horovod's order: Gloo when asked, else MPI when asked, else MPI where it can run, else Gloo."""
    if use_gloo:
        return "direct"
    if use_mpi:
        return "mpirun"
    return "mpirun" if mpirun_unavailable() is None else "direct"


def _start_timeout(start_timeout: float | None) -> float:
    if start_timeout is not None:
        return start_timeout
    return float(os.environ.get("HOROVOD_SPARK_START_TIMEOUT", START_TIMEOUT_S))


def _nic_env(nics: Sequence[str] | None) -> dict[str, str]:
    """The variables that pin Horovod's Gloo, torch's Gloo and NCCL to the given interfaces."""
    if not nics:
        return {}
    names = sorted(nics) if isinstance(nics, (set, frozenset)) else list(nics)
    return {
        "HOROVOD_GLOO_IFACE": names[0],
        "GLOO_SOCKET_IFNAME": ",".join(names),
        "NCCL_SOCKET_IFNAME": ",".join(names),
    }
