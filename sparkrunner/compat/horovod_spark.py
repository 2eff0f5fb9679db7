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
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from typing import IO, TYPE_CHECKING, Any

from sparkrunner.common.lazy_exports import lazy_exports
from sparkrunner.compat.spark_facts import positive_int
from sparkrunner.driver.launcher_choice.auto import mpirun_unavailable
from sparkrunner.errors import InvalidArgumentError, SparkRunnerWarning
from sparkrunner.options import LauncherName
from sparkrunner.placement.spark_sessions import find_spark_session, is_connect_session
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

__all__ = ["KerasEstimator", "KerasModel", "TorchEstimator", "TorchModel", "run", "run_elastic"]

RESET_LIMIT = 10
"""Restarts a `run_elastic` run allows when its `reset_limit` is None (Horovod's None: no limit); a rescale to
more slots is not counted."""
_ELASTIC_ENTRY = ("sparkrunner.ranks.horovod_elastic", "run")
"""The rank-side wrapper that ties Horovod's elastic states to the run's checkpoints."""
_NO_MEANING_HERE = {
    "host_discovery_script": "sparkrunner sizes the run by Spark's free task slots: set min_num_proc/max_num_proc",
    "discovery": "sparkrunner sizes the run by Spark's free task slots: set min_num_proc/max_num_proc",
    "hosts": "the ranks run in Spark tasks, where Spark places them: set num_proc",
    "hostfile": "the ranks run in Spark tasks, where Spark places them: set num_proc",
    "slots": "each rank is one Spark task slot: set num_proc",
    "cooldown_range": "a lost executor's slots come back when Spark gives them back; nothing to cool down",
    "blacklist_cooldown_range": "a lost executor's slots come back when Spark gives them back; nothing to cool down",
    "use_mpi": "Horovod Elastic runs on Gloo (sparkrunner's direct launcher), as Horovod's own",
    "extra_mpi_args": "Horovod Elastic runs on Gloo (sparkrunner's direct launcher), as Horovod's own",
}
"""Elastic arguments of Horovod's other launchers (horovodrun, horovod.run) that mean nothing on Spark, and what
to use instead."""


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


def run_elastic(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    num_proc: int | None = None,
    min_num_proc: int | None = None,
    max_num_proc: int | None = None,
    start_timeout: float | None = None,
    elastic_timeout: float | None = None,
    reset_limit: int | None = None,
    env: Mapping[str, str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    verbose: int = 1,
    nics: Sequence[str] | None = None,
    prefix_output_with_timestamp: bool = False,
    min_np: int | None = None,
    max_np: int | None = None,
    **runner_options: Any,
) -> list[Any]:
    """Run Horovod Elastic code (``@hvd.elastic.run`` over ``hvd.elastic.TorchState`` / ``ObjectState``)
    unchanged on `num_proc` ranks in Spark barrier stages; every rank's value of the last attempt, in order.

    A lost rank ends the attempt and the next starts at the slots there are (at least `min_num_proc`), from the
    last ``state.commit()`` (kept as the run's checkpoint), calling the state's reset callbacks; slots that come
    back (up to `max_num_proc`) grow the run at the next commit (docs/elastic.md, "Horovod Elastic").

    Args:
        num_proc: the ranks to start with; default ``spark.default.parallelism``.
        min_num_proc, max_num_proc: the range of sizes (default: `num_proc`); ``min_np``/``max_np``: their
            old names, as in Horovod.
        start_timeout: seconds for the ranks to start; default ``HOROVOD_SPARK_START_TIMEOUT``, else 600.
        elastic_timeout: seconds a restart waits for `min_num_proc` slots; default ``HOROVOD_ELASTIC_TIMEOUT``,
            else 600. sparkrunner has one wait for both: the larger of the two bounds every attempt.
        reset_limit: restarts after lost ranks (`Runner`'s `max_failures`); None: `RESET_LIMIT`.
        env, stdout, stderr, verbose, nics: as for `run`.
        prefix_output_with_timestamp: accepted; sparkrunner prefixes each line with its rank.
        runner_options: `sparkrunner.Runner`'s own keywords; ``checkpoint_dir`` (a folder every executor and the
            driver can read) is required, except on a local master (``local[N]``, ``local-cluster[...]``), where
            a folder is made for the run.
    """
    from sparkrunner.ml.entry import RankEntry
    from sparkrunner.runner import Runner

    _refuse_no_meaning(runner_options)
    spark = find_spark_session()
    size = _elastic_size(
        _num_proc(spark, num_proc),
        min_num_proc if min_num_proc is not None else min_np,
        max_num_proc if max_num_proc is not None else max_np,
    )
    restarts = RESET_LIMIT if reset_limit is None else _non_negative("reset_limit", reset_limit)
    if verbose >= 1:
        log.info("Running %s processes (Horovod Elastic, launcher direct)...", size)
    with _checkpoint_dir(spark, runner_options.pop("checkpoint_dir", None)) as folder:
        runner = Runner(
            size,
            spark=spark,
            launcher="direct",
            horovod=True,
            start_timeout=max(_start_timeout(start_timeout), _elastic_timeout(elastic_timeout)),
            env={**(env or {}), **_nic_env(nics)},
            max_failures=restarts,
            checkpoint_dir=folder,
            **runner_options,
        )
        with redirect_stdout(stdout or sys.stdout), redirect_stderr(stderr or sys.stderr):
            return runner.run_all(RankEntry(*_ELASTIC_ENTRY), fn, *args, **(kwargs or {}))


@contextmanager
def _checkpoint_dir(spark: Any, given: str | None) -> Iterator[str]:
    """Where the run's commits go: `given`; on a local master (one machine: the driver's temporary folder is the
    executors'), by default a folder made for the run and removed at its end."""
    if given is not None:
        yield given
        return
    if not str(spark.conf.get("spark.master", "")).startswith("local"):
        raise InvalidArgumentError(
            "run_elastic keeps each state.commit() as a checkpoint of the run, which the next attempt restores: "
            "pass checkpoint_dir='/a/folder/every/executor/and/the/driver/can/read'"
        )
    with tempfile.TemporaryDirectory(prefix="sparkrunner-elastic-") as folder:
        yield folder


def _refuse_no_meaning(given: Mapping[str, Any]) -> None:
    for name in given:
        if name in _NO_MEANING_HERE:
            raise InvalidArgumentError(
                f"run_elastic({name}=...) has no meaning here: {_NO_MEANING_HERE[name]}"
            )
    if "np" in given:
        raise InvalidArgumentError("run_elastic(np=...): the size is num_proc, min_num_proc and max_num_proc")


def _elastic_size(start: int, least: int | None, most: int | None) -> int | tuple[int, int]:
    """`Runner`'s `np` for Horovod's sizes: a fixed size, or the range ``(least, most)``."""
    low = start if least is None else positive_int("min_num_proc", least)
    high = start if most is None else positive_int("max_num_proc", most)
    if low > high:
        raise InvalidArgumentError(f"min_num_proc={low} is larger than max_num_proc={high}")
    if not low <= start <= high:
        raise InvalidArgumentError(f"num_proc={start} is outside min_num_proc={low} .. max_num_proc={high}")
    return high if low == high else (low, high)


def _non_negative(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{name} must be a whole number >= 0, not {value!r}")
    return value


def _elastic_timeout(elastic_timeout: float | None) -> float:
    if elastic_timeout is not None:
        if (
            isinstance(elastic_timeout, bool)
            or not isinstance(elastic_timeout, (int, float))
            or elastic_timeout <= 0
        ):
            raise InvalidArgumentError(
                f"elastic_timeout must be a number of seconds > 0, not {elastic_timeout!r}"
            )
        return float(elastic_timeout)
    return float(os.environ.get("HOROVOD_ELASTIC_TIMEOUT", START_TIMEOUT_S))


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
