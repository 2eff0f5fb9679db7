"""The public entry point: validate, serialize, place the ranks, supervise them, return rank 0's value."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkrunner import causes, processes
from sparkrunner.diagnostics import StackReport, StallWatch, hang_error
from sparkrunner.driver import VERBOSITIES, DriverSession
from sparkrunner.errors import (
    ExecutorDecommissionedError,
    InvalidArgumentError,
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
from sparkrunner.placement.connect import ConnectPlacement
from sparkrunner.placement.local import LocalPlacement
from sparkrunner.placement.spark import SparkPlacement
from sparkrunner.progress import ProgressObserver
from sparkrunner.protocol import Env
from sparkrunner.recovery.attempts import RetryPredicate, run_attempts
from sparkrunner.recovery.checkpoint_dir import RunCheckpoints
from sparkrunner.recovery.checkpoints import list_checkpoints
from sparkrunner.recovery.options import RecoveryOptions
from sparkrunner.script import module_call, script_call
from sparkrunner.sessions import find_spark_session, is_connect_session
from sparkrunner.tracking import tracking_observer

log = logging.getLogger("sparkrunner")

_POLL_S = 0.1
_FINISH_GRACE_S = 5.0


class Runner:
    """Runs a Python function (or a script, or a module) on `np` ranks and returns rank 0's return value.

    Args:
        np: ranks to start. ``np > 0``: one Spark barrier stage of ``np`` tasks on the given SparkSession,
            else this thread's active one, else the process's default one (classic or Spark Connect). ``np < 0``: ``|np|`` processes on the driver machine, no Spark job at all.
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
        max_failures: failed attempts to retry: each retry starts every rank again (a new barrier stage) and
            `main` resumes from `sparkrunner.load_checkpoint()`. 0 (default): the first failure ends the run.
        checkpoint_dir: where `sparkrunner.save_checkpoint` writes. ``np < 0``: default, a folder made for the
            run (removed at its end). ``np > 0``: a path the driver and every executor can read; required when
            ``max_failures > 0``.
        stop_grace_s: seconds a stopping rank gets (SIGTERM, `sparkrunner.stopping()` true) before SIGKILL.
        retry_if: ``retry_if(error) -> bool`` decides whether a failed attempt is retried (default: yes,
            except argument errors and `sparkrunner.errors.DoNotRetry`).
        stall_timeout: seconds without any rank printing or reporting progress after which every rank's
            Python stack is shown (default None: off). Use it for long runs that may hang in a collective
            (uneven data, a lost peer), set well above the longest quiet stretch of a healthy run.
        on_stall: ``"warn"`` shows the stacks and keeps running; ``"fail"`` stops the run with `StallError`.
        horovod: whether the function uses Horovod, so the direct launcher hosts Horovod's Gloo rendezvous
            server. ``None`` (default): detected (the function imports Horovod or uses a Horovod module); say
            ``True`` when it reaches Horovod only through another function or module of your own.
        use_gpu: ``None`` (default): each rank gets its Spark task's GPUs, with a warning when a host has GPUs
            that Spark gave its tasks none of; ``True``: refuse to start unless Spark assigns GPUs to tasks
            (``np < 0``: unless this machine has one); ``False``: hide every GPU from the ranks (CPU training).
        ranks_per_task: ranks each Spark task starts (``np > 0``): ``np / ranks_per_task`` barrier tasks, the
            task's GPUs split among its ranks. ``None`` (default): the task's GPU count when Spark gives tasks
            more than one GPU, else 1.
        port_range: ``(low, high)``: every port sparkrunner opens (driver channel, rendezvous, task agents,
            torch/TF/MPI listening ports) comes from this range, for firewalls and network policies. Defaults
            to ``SPARKRUNNER_PORT_RANGE`` ("low-high") when set, else any free port.

    After each call, `last_run` is the `RunRecord` of that run (duration, error, attempts, per-rank timings,
    MLflow id).
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
        max_failures: int = 0,
        checkpoint_dir: str | None = None,
        stop_grace_s: float = 10.0,
        retry_if: RetryPredicate | None = None,
        stall_timeout: float | None = None,
        on_stall: str = "warn",
        horovod: bool | None = None,
        use_gpu: bool | None = None,
        ranks_per_task: int | None = None,
        port_range: tuple[int, int] | None = None,
    ) -> None:
        _check_np(np)
        self.recovery = RecoveryOptions.checked(np, max_failures, checkpoint_dir, stop_grace_s, retry_if)
        _check_ranks_per_task(np, ranks_per_task)
        self.ranks_per_task = ranks_per_task
        if driver_log_verbosity not in VERBOSITIES:
            raise InvalidArgumentError(
                f"driver_log_verbosity={driver_log_verbosity!r} is not one of {', '.join(map(repr, VERBOSITIES))}"
            )
        _check_seconds("start_timeout", start_timeout)
        if timeout is not None:
            _check_seconds("timeout", timeout)
        if stall_timeout is not None:
            _check_seconds("stall_timeout", stall_timeout)
        if on_stall not in ("warn", "fail"):
            raise InvalidArgumentError(f"on_stall={on_stall!r} is not one of 'warn', 'fail'")
        self.np = np
        self.launcher = launcher
        self.driver_log_verbosity = driver_log_verbosity
        self.start_timeout = float(start_timeout)
        self.timeout = timeout
        self.stall_timeout = stall_timeout
        self.on_stall = on_stall
        self._session: DriverSession | None = None
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        if use_gpu not in (None, True, False):
            raise InvalidArgumentError(f"use_gpu must be None, True or False, not {use_gpu!r}")
        self.use_gpu = use_gpu
        self._spark = spark
        self.horovod = horovod
        self.port_range = configured_port_range(port_range)
        self._observers = [ProgressObserver(show=bool(progress)), *tracking_observer(tracking), *observers]
        self.last_run: RunRecord | None = None
        self.received_files: dict[str, str] = {}
        """After `run`: files the ranks sent (e.g. a Horovod timeline), "rank N/name" -> path on the driver."""

    def run(self, main: Callable[..., Any] | str | os.PathLike[str], *args: Any, **kwargs: Any) -> Any:
        """Run ``main(*args, **kwargs)`` on every rank; return rank 0's value or raise the first failure.

        ``main`` may also be the path of a script: ``run("train.py", "--lr", "0.1")`` is `run_script`.
        """
        if isinstance(main, (str, os.PathLike)):
            code_dir = kwargs.pop("code_dir", None)
            if kwargs:
                raise InvalidArgumentError(
                    f"a script takes command-line arguments, not keyword arguments ({', '.join(kwargs)}): "
                    f"run('train.py', '--lr', '0.1')"
                )
            return self.run_script(main, *args, code_dir=code_dir)
        return self._execute(main, args, kwargs, _name_of(main), every_rank=False)[0]

    def run_all(self, main: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """Like `run`, but return every rank's return value, in rank order (as ``horovod.spark.run`` does)."""
        return self._execute(main, args, kwargs, _name_of(main), every_rank=True)

    def run_script(
        self, path: str | os.PathLike[str], *argv: Any, code_dir: str | os.PathLike[str] | None = None
    ) -> None:
        """Run the script at `path` as ``__main__`` on every rank, with ``sys.argv = [path, *argv]``.

        The script is sent from the driver; `code_dir`, a folder of helper modules, is sent with it and put
        first on ``sys.path``. A non-zero ``sys.exit`` fails the run with `RankFailedError` (``exit_code``).
        """
        call = script_call(path, argv, code_dir)
        self._execute(call, (), {}, call.name, every_rank=False)

    def run_module(self, module: str, *argv: Any, code_dir: str | os.PathLike[str] | None = None) -> None:
        """Run `module` as ``python -m module argv...`` on every rank; `code_dir` ships its package along."""
        call = module_call(module, argv, code_dir)
        self._execute(call, (), {}, call.name, every_rank=False)

    def _execute(
        self, main: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, every_rank: bool
    ) -> list[Any]:
        """Place, start and supervise one run; rank 0's value (or every rank's) in a list."""
        payload = _function_payload(main, args, kwargs)
        launcher = resolve_launcher(self.launcher)
        spark = None if self.np < 0 else self._spark if self._spark is not None else find_spark_session()
        per_task = _ranks_per_task(self.np, self.ranks_per_task, spark)
        self._placement(launcher, spark, self.np // per_task).check()
        observers = Observers(self._observers)
        record = self.last_run = RunRecord(uuid.uuid4().hex, name, self.np, launcher.name)
        self.received_files = {}
        checkpoints = RunCheckpoints.open(self.recovery.checkpoint_dir, record.run_id, self.np < 0)
        env = {**observers.start(record), **self.env, **checkpoints.rank_env()}
        if every_rank:
            env[Env.RESULTS] = "all"
        uses_horovod = horovod_env.wants_rendezvous(main, self.horovod)
        wanted = range(abs(self.np)) if every_rank else range(1)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout

        def attempt(number: int) -> list[Any]:
            job_env = {**env, **self.recovery.rank_env(number)}
            run_id = record.run_id if number == 0 else f"{record.run_id}-attempt{number}"
            spec = RankJobSpec(run_id, job_env, uses_horovod, per_task)
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            timeout = self.timeout if number == 0 else left
            return self._attempt(payload, launcher, observers, spec, spark, wanted, timeout)

        try:
            values = run_attempts(
                self.recovery.policy,
                record.attempts,
                attempt,
                lambda: next((c.step for c in list_checkpoints(checkpoints.folder)), None),
                lambda: self._before_retry(launcher, spark, self.np // per_task),
            )
        except BaseException as exc:
            observers.end(record, exc)
            raise
        finally:
            checkpoints.close()
        observers.end(record, None)
        return values

    def _attempt(
        self,
        payload: bytes,
        launcher: Launcher,
        observers: Observers,
        spec: RankJobSpec,
        spark: Any,
        wanted: Iterable[int],
        timeout: float | None,
    ) -> list[Any]:
        """One attempt: a fresh placement and driver session; every rank of it is gone when this returns."""
        placement = self._placement(launcher, spark, abs(self.np) // spec.ranks_per_task)
        own = own_ports(self.port_range)
        port = free_ports(1, placement.bind_host, own, slot=-1)[0] if own else 0
        session = DriverSession(
            payload,
            abs(self.np),
            self.driver_log_verbosity,
            placement.bind_host,
            [observers.on_message],
            port,
        )
        driver = (placement.driver_host, session.port)
        job = RankJob(
            spec.run_id,
            driver,
            session.secret,
            spec.env,
            spec.uses_horovod,
            self.use_gpu,
            port_range=self.port_range,
            ranks_per_task=spec.ranks_per_task,
        )
        stall = StallWatch(self.stall_timeout, self.on_stall)
        self._session = session
        try:
            _run_ranks(
                session, placement, job, self.start_timeout, timeout, self.recovery.stop_grace_s, stall
            )
            return _results(session, wanted)
        finally:
            self._session = None
            self.received_files.update(session.report.files)

    def _before_retry(self, launcher: Launcher, spark: Any, tasks: int) -> None:
        """Wait for the cluster to offer the slots again (executors lost with the failed attempt come back)."""
        self._placement(launcher, spark, tasks).check()  # on Spark: waits up to start_timeout for the slots

    def dump_stacks(self) -> StackReport:
        """Every live rank's Python stacks (all threads) and last output lines, while `run` is in flight.

        Call it from another thread or notebook cell; ``print(report)`` shows the full dumps,
        ``report.summary()`` one line per rank.
        """
        session = self._session
        if session is None:
            raise SparkRunnerError(
                "dump_stacks() needs a run in flight: no run of this Runner is running now"
            )
        return session.collect_stacks()

    def _placement(self, launcher: Launcher, spark: Any, tasks: int) -> Placement:
        if self.np < 0:
            return LocalPlacement(-self.np, launcher, self.use_gpu)
        if is_connect_session(spark):
            return ConnectPlacement(spark, tasks, launcher, self.use_gpu)
        return SparkPlacement(spark, tasks, launcher, self.start_timeout, self.use_gpu)


class HorovodRunner(Runner):
    """Drop-in for Databricks' HorovodRunner: ``HorovodRunner(np=...).run(main, **kwargs)``; the function
    uses Horovod, so the direct launcher always hosts its rendezvous (``horovod=True`` unless told otherwise)."""

    def __init__(self, np: int, driver_log_verbosity: str = "log_callback_only", **options: Any) -> None:
        options.setdefault("horovod", True)
        super().__init__(np, driver_log_verbosity=driver_log_verbosity, **options)

    def run(self, main: Callable[..., Any] | str | os.PathLike[str], **kwargs: Any) -> Any:
        return super().run(main, **kwargs)


def _function_payload(main: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    if not callable(main):
        raise InvalidArgumentError(
            f"main must be a function to run on every rank (or a script's path), not a {type(main).__name__}"
        )
    return dumps_call(main, args, kwargs)


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


def _check_ranks_per_task(np: int, ranks_per_task: Any) -> None:
    if ranks_per_task is None:
        return
    if isinstance(ranks_per_task, bool) or not isinstance(ranks_per_task, int) or ranks_per_task < 1:
        raise InvalidArgumentError(f"ranks_per_task must be an int >= 1 or None, not {ranks_per_task!r}")
    if np < 0 and ranks_per_task != 1:
        raise InvalidArgumentError(
            "ranks_per_task applies to Spark runs (np > 0); np < 0 runs |np| local ranks"
        )
    if np > 0 and np % ranks_per_task:
        raise InvalidArgumentError(
            f"np={np} is not a multiple of ranks_per_task={ranks_per_task}: every task starts the same number "
            f"of ranks"
        )


def _ranks_per_task(np: int, requested: int | None, spark: Any) -> int:
    """`requested`, else the GPUs Spark gives each task when more than one (one rank per GPU), else 1."""
    if np < 0:
        return 1
    if requested is not None:
        return requested
    amount = float(spark.conf.get("spark.task.resource.gpu.amount", "0") or 0)
    if amount <= 1 or not amount.is_integer():
        return 1
    if np % int(amount):
        raise InvalidArgumentError(
            f"each task has {int(amount)} GPUs, so each starts {int(amount)} ranks by default, but np={np} is not "
            f"a multiple of {int(amount)}; pass ranks_per_task=... explicitly"
        )
    return int(amount)


def _check_seconds(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive number of seconds, not {value!r}")


@dataclass(frozen=True)
class RankJobSpec:
    """What differs between the attempts of one run: the processes' run id and the ranks' environment."""

    run_id: str
    env: dict[str, str]
    uses_horovod: bool
    ranks_per_task: int


def _run_ranks(
    session: DriverSession,
    placement: Placement,
    job: RankJob,
    start_timeout: float,
    timeout: float | None,
    stop_grace_s: float,
    stall: StallWatch,
) -> None:
    """Start the ranks, wait for them, and always shut everything down."""
    try:
        placement.start(job)
        _supervise(session, placement, start_timeout, timeout, stall)
    except BaseException as exc:
        causes.shut_down_after_failure(
            lambda: _shut_down(session, placement, job.run_id, False, stop_grace_s), exc
        )
        raise
    _shut_down(session, placement, job.run_id, True, stop_grace_s)


def _supervise(
    session: DriverSession,
    placement: Placement,
    start_timeout: float,
    timeout: float | None,
    stall: StallWatch,
) -> None:
    """Wait until every rank reported, or raise the first failure / timeout."""
    started = time.monotonic()
    report = session.report
    with session.changed:
        while True:
            if report.errors or report.vanished:
                failure = causes.run_failure(session, placement)
                raise failure from failure.original
            if report.all_done():
                return
            decommissioning = placement.decommissioning(session.spark_task_ids())
            if decommissioning is not None:
                raise ExecutorDecommissionedError(
                    f"{decommissioning}: every rank was asked to stop, and ranks that watch stopping() or "
                    f"on_stop() had stop_grace_s to save a checkpoint"
                )
            if (placement.finished() or placement.failure() is not None) and not causes.wait_until(
                session, lambda: report.all_done() or bool(report.errors or report.vanished), _FINISH_GRACE_S
            ):
                missing = report.num_ranks - _done_count(session)
                raise causes.ended_without_result(session, placement, missing)
            elapsed = time.monotonic() - started
            if not report.all_connected() and elapsed > start_timeout:
                message = _start_timeout_message(session, start_timeout)
                raise hang_error(StartTimeoutError, message, session.collect_stacks())
            if timeout is not None and elapsed > timeout:
                message = f"the run did not finish within timeout={timeout} s; every rank was stopped"
                raise hang_error(RunTimeoutError, message, session.collect_stacks())
            if report.all_connected():
                stall.check(session.last_activity, session.collect_stacks)
            session.changed.wait(_POLL_S)


def _done_count(session: DriverSession) -> int:
    return sum(1 for s in session.report.ranks.values() if s.done)


def _start_timeout_message(session: DriverSession, start_timeout: float) -> str:
    report = session.report
    connected = sorted(r for r, s in report.ranks.items() if s.connected_at is not None)
    return (
        f"only {len(connected)} of {report.num_ranks} ranks started within start_timeout={start_timeout} s "
        f"(connected: {connected or 'none'}). The cluster may be busy with other jobs, or executors are "
        f"missing; every rank that did start was stopped."
    )


def _shut_down(
    session: DriverSession, placement: Placement, run_id: str, succeeded: bool, stop_grace_s: float
) -> None:
    """Leave nothing behind: on success let the ranks exit on their own first, otherwise stop them (SIGTERM,
    up to `stop_grace_s` to save a checkpoint) and kill what is left."""
    if succeeded:
        deadline = time.monotonic() + _FINISH_GRACE_S * 6
        while not placement.finished() and time.monotonic() < deadline:
            time.sleep(_POLL_S / 2)
    else:
        session.stop_ranks(stop_grace_s)
    placement.stop()
    session.close()
    leftover = processes.sweep_run(run_id, grace_s=2.0)  # the run as a whole has ended
    if leftover:
        log.warning("killed %d leftover process(es) of run %s: %s", len(leftover), run_id, leftover)


def _results(session: DriverSession, ranks: Iterable[int]) -> list[Any]:
    values = []
    for rank in ranks:
        try:
            values.append(session.result_value(rank))
        except Exception as exc:
            raise SparkRunnerError(
                f"rank {rank}'s return value could not be unpickled on the driver: {exc}. Return plain Python, "
                f"numpy or torch objects whose classes the driver can import."
            ) from exc
    return values
