"""The public entry point: validate, serialize, place the ranks, supervise them, return rank 0's value."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkrunner.channel.environment import Env
from sparkrunner.channel.payload import dumps_call
from sparkrunner.data.streaming import check_feeder_slots
from sparkrunner.driver import causes
from sparkrunner.driver.in_flight import InFlight, InFlightWatch
from sparkrunner.driver.session import DriverSession
from sparkrunner.driver.session_pool import SessionPool
from sparkrunner.driver.stacks import StackReport, StallWatch
from sparkrunner.driver.supervisor import Supervisor
from sparkrunner.driver.warm_session import WarmSession
from sparkrunner.errors import (
    InvalidArgumentError,
    SparkRunnerError,
)
from sparkrunner.launch import Launcher, RankJob, processes, resolve_launcher
from sparkrunner.launch.network import server_port
from sparkrunner.observe.anatomy import AnatomyObserver
from sparkrunner.observe.observers import Observers, RunObserver, RunRecord
from sparkrunner.observe.progress import ProgressObserver
from sparkrunner.observe.tracking import tracking_observer
from sparkrunner.options import LauncherName, OnStall, RunOptions, Verbosity
from sparkrunner.placement import Placement
from sparkrunner.placement.connect import ConnectPlacement
from sparkrunner.placement.local import LocalPlacement
from sparkrunner.placement.sessions import find_spark_session, is_connect_session
from sparkrunner.placement.spark import SparkPlacement
from sparkrunner.placement.warm import WarmRanks
from sparkrunner.recovery.attempts import RetryPredicate, run_attempts
from sparkrunner.recovery.checkpoint_dir import RunCheckpoints, latest_step
from sparkrunner.recovery.elastic import Sizing
from sparkrunner.recovery.options import RecoveryOptions
from sparkrunner.recovery.size_range import parse_np
from sparkrunner.script import module_call, script_call
from sparkrunner.timeouts import (
    EXIT_WAIT_S,
    SESSION_IDLE_S,
    START_TIMEOUT_S,
    STOP_GRACE_S,
    SUPERVISE_POLL_S,
    SWEEP_GRACE_S,
)
from sparkrunner.voice import install_default_handler

log = logging.getLogger(__name__)


class Runner:
    """Runs a Python function (or a script, or a module) on `np` ranks and returns rank 0's return value.

    Args:
        np: ranks to start. ``(min, max)``: an elastic run, sized by the slots there are (docs/elastic.md).
            ``np > 0``: one Spark barrier stage of ``np`` tasks on the given SparkSession,
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
        horovod: whether the direct launcher hosts Horovod's Gloo rendezvous server beside rank 0. ``None``
            (default): whenever Horovod is installed there, however the function reaches ``hvd.init()``;
            ``False``: never (no listening port); ``True``: always, and a port it cannot listen on fails the run.
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
        np: int | tuple[int, int],
        *,
        spark: Any = None,
        launcher: LauncherName = "auto",
        driver_log_verbosity: Verbosity = "all",
        start_timeout: float = START_TIMEOUT_S,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        tracking: Any = None,
        progress: bool = True,
        observers: Sequence[RunObserver] = (),
        max_failures: int = 0,
        checkpoint_dir: str | None = None,
        stop_grace_s: float = STOP_GRACE_S,
        retry_if: RetryPredicate | None = None,
        stall_timeout: float | None = None,
        on_stall: OnStall = "warn",
        horovod: bool | None = None,
        use_gpu: bool | None = None,
        ranks_per_task: int | None = None,
        port_range: tuple[int, int] | None = None,
    ) -> None:
        install_default_handler()
        fixed_np, np_range = parse_np(np)
        self.options = RunOptions(
            np=fixed_np, np_range=np_range, spark=spark, launcher=launcher, driver_log_verbosity=driver_log_verbosity,
            start_timeout=start_timeout, timeout=timeout, env=env or {}, tracking=tracking,
            progress=progress, observers=observers, max_failures=max_failures,
            checkpoint_dir=checkpoint_dir, stop_grace_s=stop_grace_s, retry_if=retry_if,
            stall_timeout=stall_timeout, on_stall=on_stall, horovod=horovod, use_gpu=use_gpu,
            ranks_per_task=ranks_per_task, port_range=port_range,
        )  # fmt: skip
        self.recovery = RecoveryOptions.of(self.options)
        live = [ProgressObserver(show=bool(progress)), AnatomyObserver(show=bool(progress))]
        self._observers = [*live, *tracking_observer(tracking), *observers]
        self._in_flight = InFlightWatch()
        self._warm_ranks: WarmRanks | None = None  # set in a `session()`'s own copy of this runner
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

    def session(self, idle_timeout: float = SESSION_IDLE_S) -> WarmSession:
        """Keep the ranks alive between runs: ``with runner.session() as s: s.run(f); s.run(g)``; from the second
        run on, no process starts. See `sparkrunner.driver.warm_session.WarmSession`."""
        return WarmSession(self, idle_timeout)

    def session_pool(self, size: int, idle_timeout: float = SESSION_IDLE_S) -> SessionPool:
        """`size` warm sessions that concurrent trials share: ``pool.run(f)`` borrows a free one (a warm one
        first). See `sparkrunner.driver.session_pool.SessionPool`."""
        return SessionPool(self, size, idle_timeout)

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
        launcher = resolve_launcher(self.options.launcher)
        spark = self._spark_session()
        per_task = _ranks_per_task(self.options.np, self.options.ranks_per_task, spark)
        sizing = Sizing(self.options.np, self.options.np_range, spark, per_task, self.options.start_timeout)
        self.placement(launcher, spark, sizing.least // per_task).check()
        check_feeder_slots((*args, *kwargs.values()), 0 if self.options.np < 0 else sizing.least // per_task)
        observers = Observers(self._observers)
        record = self.last_run = RunRecord(uuid.uuid4().hex, name, self.options.np, launcher.name)
        self.received_files = {}
        checkpoints = RunCheckpoints.open(self.recovery.checkpoint_dir, record.run_id, self.options.np < 0)
        env = {**observers.start(record), **self.options.env, **checkpoints.rank_env()}
        if every_rank:
            env[Env.RESULTS] = "all"
        deadline = None if self.options.timeout is None else time.monotonic() + self.options.timeout

        def attempt(number: int) -> list[Any]:
            size = record.attempts[-1].world_size = sizing.size_for(number)
            job_env = {**env, **self.recovery.rank_env(number)}
            run_id = record.run_id if number == 0 else f"{record.run_id}-attempt{number}"
            spec = RankJobSpec(
                run_id, job_env, self.options.horovod, per_task, job_description(record, run_id), size
            )
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            timeout = self.options.timeout if number == 0 else left
            wanted = range(size) if every_rank else range(1)
            return sizing.run(
                size,
                lambda: self._attempt(payload, launcher, observers, spec, spark, wanted, timeout),
                lambda: self._in_flight.session,
            )

        try:
            values = run_attempts(
                self.recovery.policy,
                record.attempts,
                attempt,
                lambda: latest_step(checkpoints.folder),
                lambda: (
                    None if sizing.elastic else self._before_retry(launcher, spark, sizing.least // per_task)
                ),
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
        placement = self.placement(launcher, spark, spec.world_size // spec.ranks_per_task)
        port = server_port(placement.bind_host, self.options.port_range)
        session = DriverSession(
            payload,
            spec.world_size,
            self.options.driver_log_verbosity,
            placement.bind_host,
            observers,
            port,
        )
        driver = (placement.driver_host, session.port)
        job = RankJob(
            spec.run_id,
            driver,
            session.secret,
            spec.env,
            spec.uses_horovod,
            self.options.use_gpu,
            port_range=self.options.port_range,
            ranks_per_task=spec.ranks_per_task,
        )
        stall = StallWatch(self.options.stall_timeout, self.options.on_stall)
        self._in_flight.publish(session)
        if self.last_run is not None:  # this run's record: its job group is known while it runs
            self.last_run.spark_job_group = placement.job_group
        try:
            _run_ranks(
                session,
                placement,
                (job, spec.description),
                self.options.start_timeout,
                timeout,
                self.recovery.stop_grace_s,
                stall,
            )
            return _results(session, wanted)
        finally:
            self._in_flight.publish(None)
            self.received_files.update(session.report.files)

    def _spark_session(self) -> Any:
        """None for local runs (np < 0), else the SparkSession given, else the active or default one."""
        if self.options.np < 0:
            return None
        return self.options.spark if self.options.spark is not None else find_spark_session()

    def _before_retry(self, launcher: Launcher, spark: Any, tasks: int) -> None:
        """Wait for the cluster to offer the slots again (executors lost with the failed attempt come back)."""
        self.placement(launcher, spark, tasks).check()  # on Spark: waits up to start_timeout for the slots

    def dump_stacks(self) -> StackReport:
        """Every live rank's Python stacks (all threads) and last output lines, while `run` is in flight.

        Call it from another thread or notebook cell; ``print(report)`` shows the full dumps,
        ``report.summary()`` one line per rank.
        """
        session = self._in_flight.session
        if session is None:
            raise SparkRunnerError(
                "dump_stacks() needs a run in flight: no run of this Runner is running now"
            )
        return session.collect_stacks()

    def ask_to_stop(self, reason: str = "stop") -> bool:
        """From another thread or an observer's hook: ask the ranks of the run in flight to stop gracefully
        (`sparkrunner.stopping()` turns true, `rank_context().stop_reason == reason`; e.g. ``"prune"``). The
        ranks end their run as they choose, within `stop_grace_s`. False when no run is in flight."""
        session = self._in_flight.session
        if session is not None:
            session.ask_ranks_to_stop(reason)
        return session is not None

    @property
    def in_flight(self) -> InFlight | None:
        """The ranks of the run in flight that have connected so far (rank, pid, host, barrier task), or None
        when no run of this Runner is running; see `sparkrunner.driver.in_flight`."""
        return self._in_flight.view()

    def wait_in_flight(self, timeout: float, ranks: int | None = None) -> InFlight:
        """From another thread: wait until a run of this Runner has `ranks` (default: every) rank connected,
        and return `in_flight` then; raises TimeoutError after `timeout` seconds."""
        return self._in_flight.wait(ranks, timeout)

    def placement(self, launcher: Launcher, spark: Any, tasks: int) -> Placement:
        """Where the ranks of one attempt run: np < 0 this machine, else Spark (classic or Connect). A subclass
        may return another `Placement` (tests use it to stand in for a failing Spark)."""
        if self._warm_ranks is not None:  # a run in a warm session: the session's live ranks
            return self._warm_ranks.placement(launcher, spark, tasks)
        if self.options.np < 0:
            return LocalPlacement(-self.options.np, launcher, self.options.use_gpu)
        if is_connect_session(spark):
            return ConnectPlacement(spark, tasks, launcher, self.options.use_gpu)
        return SparkPlacement(spark, tasks, launcher, self.options.start_timeout, self.options.use_gpu)


class HorovodRunner(Runner):
    """Drop-in for Databricks' HorovodRunner: ``HorovodRunner(np=...).run(main, **kwargs)`` (the direct launcher
    hosts Horovod's rendezvous wherever Horovod is installed, as for every `Runner`)."""

    def __init__(
        self, np: int, driver_log_verbosity: Verbosity = "log_callback_only", **options: Any
    ) -> None:
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


def job_description(record: RunRecord, run_id: str) -> str:
    """The run's barrier job in Spark's UI: what runs, how, its MLflow run and sparkrunner's run id."""
    mlflow = "" if record.mlflow_run_id is None else f" mlflow={record.mlflow_run_id}"
    return f"sparkrunner: {record.function} np={record.np} launcher={record.launcher}{mlflow} run={run_id}"


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


@dataclass(frozen=True)
class RankJobSpec:
    """What differs between the attempts of one run: the processes' run id and the ranks' environment."""

    run_id: str
    env: dict[str, str]
    uses_horovod: bool | None
    ranks_per_task: int
    description: str
    world_size: int


def _run_ranks(
    session: DriverSession,
    placement: Placement,
    described: tuple[RankJob, str],
    start_timeout: float,
    timeout: float | None,
    stop_grace_s: float,
    stall: StallWatch,
) -> None:
    """Start the ranks (`described`: the job and its description in Spark's UI), wait for them, and always shut
    everything down."""
    job, description = described
    try:
        placement.start(job, description)
        Supervisor(session, placement, start_timeout, timeout, stall).wait()
    except BaseException as exc:
        causes.shut_down_after_failure(
            lambda: _shut_down(session, placement, job.run_id, False, stop_grace_s), exc
        )
        raise
    _shut_down(session, placement, job.run_id, True, stop_grace_s)


def _shut_down(
    session: DriverSession, placement: Placement, run_id: str, succeeded: bool, stop_grace_s: float
) -> None:
    """Leave nothing behind: on success let the ranks exit on their own first (not what they left: a daemon
    may hold mpirun up), otherwise stop them (SIGTERM, up to `stop_grace_s`) and kill what is left."""
    if succeeded:
        deadline = time.monotonic() + EXIT_WAIT_S
        with session.changed:  # a rank hanging up wakes it (a warm session's ranks stay up)
            while not (placement.finished() or session.ranks_ended_here()) and time.monotonic() < deadline:
                session.changed.wait(SUPERVISE_POLL_S / 2)
    else:
        session.stop_ranks(stop_grace_s)
    placement.stop()
    session.close()
    leftover = processes.sweep_run(run_id, grace_s=SWEEP_GRACE_S)  # the run as a whole has ended
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
