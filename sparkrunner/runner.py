"""The public entry point: validate, serialize, place the ranks, supervise them, return rank 0's value."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sparkrunner import processes
from sparkrunner.driver import VERBOSITIES, DriverSession
from sparkrunner.errors import (
    InvalidArgumentError,
    RankFailedError,
    RunTimeoutError,
    SparkRunnerError,
    StartTimeoutError,
)
from sparkrunner.frameworks import horovod_env
from sparkrunner.launch import Launcher, RankJob, resolve_launcher
from sparkrunner.network import configured_port_range, free_ports, own_ports
from sparkrunner.observers import Observers, RunObserver, RunRecord
from sparkrunner.payload import dumps_call
from sparkrunner.placement import Placement
from sparkrunner.placement.local import LocalPlacement
from sparkrunner.placement.spark import SparkPlacement, active_spark_session
from sparkrunner.progress import ProgressObserver
from sparkrunner.tracking import tracking_observer

log = logging.getLogger("sparkrunner")

_POLL_S = 0.1
_DETAIL_WAIT_S = 3.0
_FINISH_GRACE_S = 5.0


class Runner:
    """Runs a Python function on `np` ranks and returns rank 0's return value.

    Args:
        np: ranks to start. ``np > 0``: one Spark barrier stage of ``np`` tasks on the active (or given)
            SparkSession. ``np < 0``: ``|np|`` processes on the driver machine, no Spark job at all.
        spark: the SparkSession to use when ``np > 0``; defaults to the active one.
        launcher: ``"auto"``, or the name of a launcher (``"direct"``: one process per task).
        driver_log_verbosity: ``"all"`` shows every rank's stdout/stderr on the driver;
            ``"log_callback_only"`` shows only what ranks send with `log_to_driver`.
        start_timeout: seconds for every rank to start and connect before the run fails.
        timeout: seconds for the whole run, or None for no limit.
        env: extra environment variables for every rank.
        tracking: record every run in MLflow. ``None`` (default): on when mlflow is installed; ``False``:
            off; ``True``: on; a string: the MLflow tracking URI to use; or a `sparkrunner.MlflowTracking`.
        progress: show a live progress bar while ranks call `sparkrunner.report_progress`.
        observers: extra `RunObserver` objects that follow every run.
        horovod: whether the function uses Horovod, so the direct launcher hosts Horovod's Gloo rendezvous
            server. ``None`` (default): detected (the function imports Horovod or uses a Horovod module); say
            ``True`` when it reaches Horovod only through another function or module of your own.
        port_range: ``(low, high)``: every port sparkrunner opens (driver channel, rendezvous, task agents,
            torch/TF/MPI listening ports) comes from this range, for firewalls and network policies. Defaults
            to ``SPARKRUNNER_PORT_RANGE`` ("low-high") when set, else any free port.

    After each call, `last_run` is the `RunRecord` of that run (duration, error, per-rank timings, MLflow id).
    """

    def __init__(
        self,
        np: int,
        *,
        spark: Any = None,
        launcher: str = "auto",
        driver_log_verbosity: str = "all",
        start_timeout: float = 600.0,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        tracking: Any = None,
        progress: bool = True,
        observers: Sequence[RunObserver] = (),
        horovod: bool | None = None,
        port_range: tuple[int, int] | None = None,
    ) -> None:
        _check_np(np)
        if driver_log_verbosity not in VERBOSITIES:
            raise InvalidArgumentError(
                f"driver_log_verbosity={driver_log_verbosity!r} is not one of {', '.join(map(repr, VERBOSITIES))}"
            )
        _check_seconds("start_timeout", start_timeout)
        if timeout is not None:
            _check_seconds("timeout", timeout)
        self.np = np
        self.launcher = launcher
        self.driver_log_verbosity = driver_log_verbosity
        self.start_timeout = float(start_timeout)
        self.timeout = timeout
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self._spark = spark
        self.horovod = horovod
        self.port_range = configured_port_range(port_range)
        self._observers = [ProgressObserver(show=bool(progress)), *tracking_observer(tracking), *observers]
        self.last_run: RunRecord | None = None
        self.received_files: dict[str, str] = {}
        """After `run`: files the ranks sent (e.g. a Horovod timeline), "rank N/name" -> path on the driver."""

    def run(self, main: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``main(*args, **kwargs)`` on every rank; return rank 0's value or raise the first failure."""
        if not callable(main):
            raise InvalidArgumentError(
                f"main must be a function to run on every rank, not a {type(main).__name__}"
            )
        payload = dumps_call(main, args, kwargs)
        launcher = resolve_launcher(self.launcher)
        placement = self._placement(launcher)
        placement.check()
        observers = Observers(self._observers)
        record = self.last_run = RunRecord(uuid.uuid4().hex, _name_of(main), self.np, launcher.name)
        port = (
            free_ports(1, placement.bind_host, own_ports(self.port_range), slot=-1)[0]
            if self.port_range
            else 0
        )
        session = DriverSession(
            payload,
            abs(self.np),
            self.driver_log_verbosity,
            placement.bind_host,
            [observers.on_message],
            port,
        )
        env = {**observers.start(record), **self.env}
        uses_horovod = horovod_env.wants_rendezvous(main, self.horovod)
        driver = (placement.driver_host, session.port)
        job = RankJob(record.run_id, driver, session.secret, env, uses_horovod, self.port_range)
        try:
            _run_ranks(session, placement, job, self.start_timeout, self.timeout)
            value = _result(session)
        except BaseException as exc:
            observers.end(record, exc)
            raise
        finally:
            self.received_files = dict(session.report.files)
        observers.end(record, None)
        return value

    def _placement(self, launcher: Launcher) -> Placement:
        if self.np < 0:
            return LocalPlacement(-self.np, launcher)
        spark = self._spark if self._spark is not None else active_spark_session()
        return SparkPlacement(spark, self.np, launcher, self.start_timeout)


class HorovodRunner(Runner):
    """Drop-in for Databricks' HorovodRunner: ``HorovodRunner(np=...).run(main, **kwargs)``."""

    def __init__(self, np: int, driver_log_verbosity: str = "log_callback_only", **options: Any) -> None:
        super().__init__(np, driver_log_verbosity=driver_log_verbosity, **options)

    def run(self, main: Callable[..., Any], **kwargs: Any) -> Any:
        return super().run(main, **kwargs)


def _name_of(main: Callable[..., Any]) -> str:
    return str(getattr(main, "__qualname__", None) or getattr(main, "__name__", None) or type(main).__name__)


def _check_np(np: Any) -> None:
    if isinstance(np, bool) or not isinstance(np, int):
        raise InvalidArgumentError(f"np must be an int (ranks), not {np!r}")
    if np == 0:
        raise InvalidArgumentError(
            "np=0 starts no rank. Use np > 0 for a Spark barrier stage of np tasks, or np < 0 to run |np| "
            "processes on the driver."
        )


def _check_seconds(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive number of seconds, not {value!r}")


def _run_ranks(
    session: DriverSession, placement: Placement, job: RankJob, start_timeout: float, timeout: float | None
) -> None:
    """Start the ranks, wait for them, and always shut everything down."""
    succeeded = False
    try:
        placement.start(job)
        _supervise(session, placement, start_timeout, timeout)
        succeeded = True
    finally:
        _shut_down(session, placement, job.run_id, succeeded)


def _supervise(
    session: DriverSession, placement: Placement, start_timeout: float, timeout: float | None
) -> None:
    """Wait until every rank reported, or raise the first failure / timeout."""
    started = time.monotonic()
    report = session.report
    with session.changed:
        while True:
            if report.errors:
                first = report.errors[0]
                raise first from first.original
            if report.all_done():
                return
            if report.vanished:
                raise _vanished_error(report.vanished[0], placement, session)
            if (placement.finished() or placement.failure() is not None) and not _wait_for(
                session, lambda: report.all_done() or bool(report.errors), _FINISH_GRACE_S
            ):
                raise _ended_without_result(placement, report.num_ranks - _done_count(session))
            elapsed = time.monotonic() - started
            if not report.all_connected() and elapsed > start_timeout:
                raise StartTimeoutError(_start_timeout_message(session, start_timeout))
            if timeout is not None and elapsed > timeout:
                raise RunTimeoutError(
                    f"the run did not finish within timeout={timeout} s; every rank was stopped"
                )
            session.changed.wait(_POLL_S)


def _wait_for(session: DriverSession, predicate: Callable[[], bool], seconds: float) -> bool:
    return session.changed.wait_for(predicate, seconds)


def _done_count(session: DriverSession) -> int:
    return sum(1 for s in session.report.ranks.values() if s.done)


def _vanished_error(rank: int, placement: Placement, session: DriverSession) -> RankFailedError:
    _wait_for(session, lambda: placement.failure() is not None, _DETAIL_WAIT_S)
    detail = placement.failure() or "no exit code is known yet"
    return RankFailedError(
        rank, "RankProcessDied", f"rank {rank}'s process ended without reporting a result ({detail})"
    )


def _ended_without_result(placement: Placement, missing: int) -> SparkRunnerError:
    detail = placement.failure() or "the ranks ended without reporting to the driver"
    return SparkRunnerError(f"{missing} rank(s) never reported a result: {detail}")


def _start_timeout_message(session: DriverSession, start_timeout: float) -> str:
    report = session.report
    connected = sorted(r for r, s in report.ranks.items() if s.connected_at is not None)
    return (
        f"only {len(connected)} of {report.num_ranks} ranks started within start_timeout={start_timeout} s "
        f"(connected: {connected or 'none'}). The cluster may be busy with other jobs, or executors are "
        f"missing; every rank that did start was stopped."
    )


def _shut_down(session: DriverSession, placement: Placement, run_id: str, succeeded: bool) -> None:
    """Leave nothing behind: on success let the ranks exit on their own first, otherwise kill them now."""
    if succeeded:
        deadline = time.monotonic() + _FINISH_GRACE_S * 6
        while not placement.finished() and time.monotonic() < deadline:
            time.sleep(_POLL_S / 2)
    else:
        session.abort_ranks()
    placement.stop()
    session.close()
    leftover = processes.sweep_run(run_id, grace_s=2.0)  # the run as a whole has ended
    if leftover:
        log.warning("killed %d leftover process(es) of run %s: %s", len(leftover), run_id, leftover)


def _result(session: DriverSession) -> Any:
    try:
        return session.result_value()
    except Exception as exc:
        raise SparkRunnerError(
            f"rank 0's return value could not be unpickled on the driver: {exc}. Return plain Python, numpy "
            f"or torch objects whose classes the driver can import."
        ) from exc
