"""One run, from payload to result: the pipeline that `Runner`, a warm session and a session pool each hold.

`RunPipeline` is built from the checked `RunOptions`, the run's observers and a placement factory (where an
attempt's ranks start: this machine, a Spark barrier stage, or a warm session's live ranks). It runs the attempt
loop, one `AttemptChannel` per attempt, and keeps what a caller reads afterwards (`last_run`, `received_files`).
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sparkrunner.channel.environment import Env
from sparkrunner.channel.payload import dumps_call
from sparkrunner.common.checkpoint_dir import RunCheckpoints, latest_step
from sparkrunner.driver import causes
from sparkrunner.driver.attempt_channel import AttemptChannel
from sparkrunner.driver.attempts import RecoveryOptions, run_attempts
from sparkrunner.driver.elastic import Sizing
from sparkrunner.driver.in_flight import InFlight, InFlightWatch
from sparkrunner.driver.stacks import StallWatch
from sparkrunner.driver.supervisor import RunDeadline, Supervisor
from sparkrunner.driver.zygotes import ZygoteLease, wants_zygotes
from sparkrunner.errors import InvalidArgumentError, SparkRunnerError
from sparkrunner.launch import Launcher, RankJob, processes
from sparkrunner.launch.driver import resolve_launcher
from sparkrunner.launch.network import server_port
from sparkrunner.observe.observers import Observers, RunObserver, RunRecord
from sparkrunner.options import RunOptions
from sparkrunner.placement import Placement
from sparkrunner.placement.sessions import find_spark_session, task_resource_amount
from sparkrunner.script import module_call, script_call
from sparkrunner.stack_report import StackReport
from sparkrunner.timeouts import EXIT_WAIT_S, OUTPUT_END_WAIT_S, SUPERVISE_POLL_S, SWEEP_GRACE_S

log = logging.getLogger(__name__)

CodeDir = str | os.PathLike[str] | None
PlacementFactory = Callable[[Launcher, Any, int], Placement]
"""Where the ranks of one attempt run, for (launcher, spark session or None, barrier tasks)."""


class RunPipeline:
    """Runs calls on ranks placed by `place`, one at a time or from several threads (each run its own record)."""

    def __init__(
        self,
        options: RunOptions,
        observers: Sequence[RunObserver],
        place: PlacementFactory,
        in_flight: InFlightWatch | None = None,
    ) -> None:
        self.options = options
        self.recovery = RecoveryOptions.of(options)
        self.observers = list(observers)
        self._place = place
        self.in_flight = in_flight or InFlightWatch()
        self.last_run: RunRecord | None = None
        self.received_files: dict[str, str] = {}

    def run(
        self, main: Callable[..., Any] | str | os.PathLike[str], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """``main(*args, **kwargs)`` on every rank: rank 0's value. A path runs that script with `args` as its
        command line (`code_dir` the one keyword it takes)."""
        if isinstance(main, (str, os.PathLike)):
            code_dir = kwargs.pop("code_dir", None)
            if kwargs:
                raise InvalidArgumentError(
                    f"a script takes command-line arguments, not keyword arguments ({', '.join(kwargs)}): "
                    f"run('train.py', '--lr', '0.1')"
                )
            return self.run_script(main, args, code_dir)
        return self.execute(main, args, kwargs, _name_of(main), every_rank=False)[0]

    def run_all(self, main: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """``main(*args, **kwargs)`` on every rank: every rank's value, in rank order."""
        return self.execute(main, args, kwargs, _name_of(main), every_rank=True)

    def run_script(self, path: str | os.PathLike[str], argv: tuple[Any, ...], code_dir: CodeDir) -> None:
        """The script at `path` as ``__main__`` on every rank, ``sys.argv = [path, *argv]``."""
        call = script_call(path, argv, code_dir)
        self.execute(call, (), {}, call.name, every_rank=False)

    def run_module(self, module: str, argv: tuple[Any, ...], code_dir: CodeDir) -> None:
        """``python -m module argv...`` on every rank; `code_dir` ships its package along."""
        call = module_call(module, argv, code_dir)
        self.execute(call, (), {}, call.name, every_rank=False)

    def execute(
        self, main: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str, every_rank: bool
    ) -> list[Any]:
        """Place, start and supervise one run; rank 0's value (or every rank's) in a list."""
        deadline = RunDeadline.starting_now(self.options.timeout)
        payload = _function_payload(main, args, kwargs)
        launcher = resolve_launcher(self.options.launcher, main, self.options.horovod, self.options.env)
        spark = self._spark_session()
        per_task = _ranks_per_task(self.options.np, self.options.ranks_per_task, spark)
        sizing = Sizing(self.options.np, self.options.np_range, spark, per_task, self.options.start_timeout)
        self._place(launcher, spark, sizing.least // per_task).check()
        _check_stream_feeders(
            (*args, *kwargs.values()), 0 if self.options.np < 0 else sizing.least // per_task
        )
        observers = Observers(self.observers)
        record = self.last_run = RunRecord(uuid.uuid4().hex, name, self.options.np, launcher.name)
        self.received_files = {}
        checkpoints = RunCheckpoints.open(self.recovery.checkpoint_dir, record.run_id, self.options.np < 0)
        env = {**observers.start(record), **self.options.env, **checkpoints.rank_env()}
        if every_rank:
            env[Env.RESULTS] = "all"
        zygotes = ZygoteLease(record.run_id, main) if wants_zygotes(self.options, launcher.name) else None

        def attempt(number: int) -> list[Any]:
            size = record.attempts[-1].world_size = sizing.size_for(number)
            if deadline is not None:
                deadline.refuse_start_when_passed(number)
            job_env = {**env, **self.recovery.rank_env(number)}
            run_id = record.run_id if number == 0 else f"{record.run_id}-attempt{number}"
            spec = RankJobSpec(
                run_id, job_env, self.options.horovod, per_task, job_description(record, run_id), size
            )
            wanted = range(size) if every_rank else range(1)
            return sizing.run(
                size,
                lambda: self._attempt(payload, launcher, observers, spec, spark, wanted, deadline, zygotes),
                lambda: self.in_flight.session,
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
            if zygotes is not None:
                zygotes.close()
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
        deadline: RunDeadline | None,
        zygotes: ZygoteLease | None = None,
    ) -> list[Any]:
        """One attempt: a fresh placement and driver session; every rank of it is gone when this returns."""
        placement = self._place(launcher, spark, spec.world_size // spec.ranks_per_task)
        port = server_port(placement.bind_host, self.options.port_range)
        session = AttemptChannel(
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
            zygote=None
            if zygotes is None
            else zygotes.spec(placement.bind_host, placement.driver_host, self.options),
        )
        stall = StallWatch(self.options.stall_timeout, self.options.on_stall)
        self.in_flight.publish(session)
        if self.last_run is not None:  # this run's record: its job group is known while it runs
            self.last_run.spark_job_group = placement.job_group
        try:
            _run_ranks(
                session,
                placement,
                (job, spec.description),
                self.options.start_timeout,
                deadline,
                self.recovery.stop_grace_s,
                stall,
            )
            return _results(session, wanted)
        finally:
            self.in_flight.publish(None)
            self.received_files.update(session.report.files)

    def _spark_session(self) -> Any:
        """None for local runs (np < 0), else the SparkSession given, else the active or default one."""
        if self.options.np < 0:
            return None
        return self.options.spark if self.options.spark is not None else find_spark_session()

    def _before_retry(self, launcher: Launcher, spark: Any, tasks: int) -> None:
        """Wait for the cluster to offer the slots again (executors lost with the failed attempt come back)."""
        self._place(launcher, spark, tasks).check()  # on Spark: waits up to start_timeout for the slots

    def dump_stacks(self) -> StackReport:
        """Every live rank's Python stacks (all threads) and last output lines, while a run is in flight."""
        session = self.in_flight.session
        if session is None:
            raise SparkRunnerError(
                "dump_stacks() needs a run in flight: no run of this Runner is running now"
            )
        return session.collect_stacks()

    def ask_to_stop(self, reason: str) -> bool:
        """Ask the ranks of the run in flight to stop gracefully; False when no run is in flight."""
        session = self.in_flight.session
        if session is not None:
            session.ask_ranks_to_stop(reason)
        return session is not None

    def in_flight_view(self) -> InFlight | None:
        """The connected ranks of the run in flight, or None between runs."""
        return self.in_flight.view()


def _check_stream_feeders(arguments: tuple[Any, ...], barrier_tasks: int) -> None:
    """A run that reads a `stream()` needs task slots for its feeders. A `StreamData` exists only once its module
    is loaded, so a run without one never imports the data path (numpy and pyarrow: the `data` extra)."""
    if "sparkrunner.data.stream_handle" in sys.modules:
        from sparkrunner.data.driver.streaming import check_feeder_slots

        check_feeder_slots(arguments, barrier_tasks)


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
    amount = task_resource_amount(spark)
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
    session: AttemptChannel,
    placement: Placement,
    described: tuple[RankJob, str],
    start_timeout: float,
    deadline: RunDeadline | None,
    stop_grace_s: float,
    stall: StallWatch,
) -> None:
    """Start the ranks (`described`: the job and its description in Spark's UI), wait for them, and always shut
    everything down."""
    job, description = described
    try:
        placement.start(job, description)
        Supervisor(session, placement, start_timeout, deadline, stall).wait()
    except BaseException as exc:
        log.debug("run %s: %s; shutting its ranks down", job.run_id, type(exc).__name__)
        causes.shut_down_after_failure(
            lambda: _shut_down(session, placement, job.run_id, False, stop_grace_s), exc
        )
        raise
    _shut_down(session, placement, job.run_id, True, stop_grace_s)


def _shut_down(
    session: AttemptChannel, placement: Placement, run_id: str, succeeded: bool, stop_grace_s: float
) -> None:
    """Leave nothing behind: on success let the ranks exit on their own first (not what they left: a daemon
    may hold mpirun up), otherwise stop them (SIGTERM, up to `stop_grace_s`) and kill what is left."""
    if succeeded:
        deadline = time.monotonic() + EXIT_WAIT_S
        with session.changed:  # a rank hanging up wakes it (a warm session's ranks stay up)
            while not (placement.finished() or session.ranks_ended_here()) and time.monotonic() < deadline:
                session.changed.wait(SUPERVISE_POLL_S / 2)
            # what a relay sent last may still wait in the driver's socket or handler queue: closing the channel
            # now would drop a rank's last lines
            causes.wait_until(session, session.output_delivered, OUTPUT_END_WAIT_S)
    else:
        session.stop_ranks(stop_grace_s)
        log.debug("run %s: every rank stopped", run_id)
    placement.stop()
    log.debug("run %s: its placement ended", run_id)
    session.close()
    leftover = processes.sweep_run(run_id, grace_s=SWEEP_GRACE_S)  # the run as a whole has ended
    if leftover:
        log.warning(
            "killed %d leftover process(es) of run %s: %s",
            len(leftover),
            run_id,
            processes.described(leftover),
        )


def _results(session: AttemptChannel, ranks: Iterable[int]) -> list[Any]:
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
