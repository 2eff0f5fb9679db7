"""The run's controller: one loop owns a run from its checks to its end, as an explicit state machine.

    CHECKING -> PLACING -> RUNNING -> STOPPING -> SUCCEEDED | RESIZING | RESTARTING | FAILED
    RESIZING -> PLACING (the resize policy grows the run), RESTARTING -> PLACING (the retry policy retries);
    PLACING -> STOPPING when the attempt cannot start (docs/architecture.md draws it)

Each state does its work and names the next. How an attempt ended (the supervisor's `Ended`, or an error of
its start, read as an `AttemptEnd`) goes to the policies for typed decisions: `StopPolicy` -> `StopDecision`
(how its ranks go), `Sizing` -> `Resize`, `RetryPolicy` -> `FailureDecision`. The checks raise their typed
errors before any process starts; after that, an attempt's error is a value the policies read, and only the
run's final error is raised.
"""

from __future__ import annotations

import enum
import logging
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkrunner.channel.environment import Env
from sparkrunner.channel.payload import dumps_call
from sparkrunner.common.checkpoint_dir import RunCheckpoints, latest_step
from sparkrunner.driver import causes
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.attempt.stacks import StallWatch
from sparkrunner.driver.attempts import (
    FailureDecision,
    RecoveryOptions,
    RetryPolicy,
    StopDecision,
    failure_line,
    final_error,
    resume_text,
)
from sparkrunner.driver.elastic import GrowWatch, Resize, Sizing
from sparkrunner.driver.in_flight import InFlightWatch
from sparkrunner.driver.supervisor import RunDeadline, Supervisor, error_of
from sparkrunner.driver.zygotes import Zygotes, zygotes_for
from sparkrunner.errors import InvalidArgumentError, SparkRunnerError
from sparkrunner.launch import Launcher, RankJob
from sparkrunner.launch.driver import resolve_launcher
from sparkrunner.observe.observers import AttemptRecord, Observers, RunObserver, RunRecord
from sparkrunner.options import RunOptions
from sparkrunner.placement import Placement
from sparkrunner.placement.factory import PlacementFactory
from sparkrunner.placement.sessions import find_spark_session, task_resource_amount
from sparkrunner.system import processes
from sparkrunner.system.network import server_port
from sparkrunner.timeouts import EXIT_WAIT_S, OUTPUT_END_WAIT_S, SUPERVISE_POLL_S, SWEEP_GRACE_S

log = logging.getLogger(__name__)


class RunState(enum.Enum):
    """Where a run is; `RunController.run` moves it from CHECKING to SUCCEEDED or FAILED."""

    CHECKING = "checking"
    """Arguments, launcher, Spark and slots are checked; the run's record opens."""
    PLACING = "placing"
    """An attempt gets its np, its placement, its channel and its job."""
    RUNNING = "running"
    """The attempt's ranks start and the supervisor watches them until the attempt ends."""
    STOPPING = "stopping"
    """The attempt's ranks go (exit, or are stopped), its placement ends, and its results are read."""
    RESIZING = "resizing"
    """The attempt ended for a larger np (not a failure): the next attempt starts at once."""
    RESTARTING = "restarting"
    """The attempt failed and the retry policy retries: the cluster gets its slots back first."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class RunCall:
    """What a run runs on every rank: ``main(*args, **kwargs)``; `every_rank`: return every rank's value."""

    main: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    name: str
    every_rank: bool


@dataclass(frozen=True)
class Attempt:
    """One attempt of a run: its number (0 first, as `rank_context().attempt` says on its ranks), its id (every
    process of the attempt carries it) and its np (its ranks)."""

    number: int
    id: str
    np: int

    @classmethod
    def of(cls, run_id: str, number: int, np: int) -> Attempt:
        return cls(number, cls.id_for(run_id, number), np)

    @staticmethod
    def id_for(run_id: str, number: int) -> str:
        """The id of attempt `number` of run `run_id`: the run's own for the first, then one per attempt."""
        return run_id if number == 0 else f"{run_id}-attempt{number}"


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt of `np` ranks ended (np 0: it never got its np), as the policies read it: its error (None:
    it succeeded) and the np its resize watch asked the ranks to stop for (None: it asked nothing)."""

    np: int
    error: BaseException | None
    grown_to: int | None = None


@dataclass(frozen=True)
class Decision:
    """The state an ended attempt leads to, and the policy's decision that chose it."""

    state: RunState
    why: Resize | FailureDecision | None = None


def decide(end: AttemptEnd, sizing: Sizing, retry: RetryPolicy, failures: int) -> Decision:
    """After an attempt ended, `failures` attempts having failed before it: resize, succeed, restart or fail."""
    resize = sizing.decide(end.np, end.grown_to, end.error)
    if resize is not None:
        return Decision(RunState.RESIZING, resize)
    if end.error is None:
        return Decision(RunState.SUCCEEDED)
    failure = retry.decide(end.error, failures)
    return Decision(RunState.RESTARTING if failure is FailureDecision.RETRY else RunState.FAILED, failure)


@dataclass
class RunOutputs:
    """What a caller reads after a run: its record (set as the run opens) and the files its ranks sent."""

    last_run: RunRecord | None = None
    received_files: dict[str, str] = field(default_factory=dict)


@dataclass
class _Run:
    """What every attempt of one run shares, from CHECKING on."""

    call: RunCall
    payload: bytes
    launcher: Launcher
    spark: Any
    ranks_per_task: int
    sizing: Sizing
    deadline: RunDeadline | None
    observers: Observers
    record: RunRecord
    checkpoints: RunCheckpoints
    env: dict[str, str]
    zygotes: Zygotes | None

    def close(self) -> None:
        self.checkpoints.close()
        if self.zygotes is not None:
            self.zygotes.close()


@dataclass(frozen=True)
class _Placed:
    """An attempt ready to run: where its ranks start, the channel they reach, and the job they are given."""

    attempt: Attempt
    placement: Placement
    channel: AttemptChannel
    job: RankJob
    description: str


class RunController:
    """Owns each run of a pipeline (`RunPipeline`, a warm session's): its states, its attempts and their
    placements, made by the placement factory it holds. Runs from several threads keep their own state."""

    def __init__(
        self,
        options: RunOptions,
        observers: Sequence[RunObserver],
        placements: PlacementFactory,
        in_flight: InFlightWatch,
        outputs: RunOutputs,
    ) -> None:
        self.options = options
        self.recovery = RecoveryOptions.of(options)
        self._observers = list(observers)
        self._placements = placements
        self._in_flight = in_flight
        self._outputs = outputs

    def run(self, call: RunCall) -> list[Any]:
        """`call` on every rank: rank 0's value (or every rank's) in a list, or the run's error raised."""
        run = self._check(call)  # CHECKING: typed errors, before any process starts
        try:
            values = self._attempts(run)
        except BaseException as exc:
            run.observers.end(run.record, exc)
            raise
        finally:
            run.close()
        run.observers.end(run.record, None)
        return values

    def _attempts(self, run: _Run) -> list[Any]:
        """From PLACING on: attempt after attempt until SUCCEEDED (returns) or FAILED (raises)."""
        state, number, failures = RunState.PLACING, 0, 0
        record = AttemptRecord(number, time.time())  # each PLACING opens the attempt's own
        placed: _Placed | None = None
        watch: GrowWatch | None = None
        error: BaseException | None = None
        end, decision = AttemptEnd(0, None), Decision(RunState.PLACING)
        values: list[Any] = []
        while True:
            log.debug("run %s: %s (attempt %d)", run.record.run_id, state.value, number)
            match state:
                case RunState.PLACING:
                    record = self._new_attempt_record(run, number)
                    placed, end = self._place(run, number, record)
                    state = RunState.STOPPING if placed is None else RunState.RUNNING
                case RunState.RUNNING:
                    assert placed is not None
                    watch = run.sizing.watch(placed.attempt.np, placed.channel)
                    error = self._run_ranks(run, placed)
                    state = RunState.STOPPING
                case RunState.STOPPING:
                    if placed is not None:  # else nothing started: `end` says why
                        values, error = self._stop(run, placed, error)
                        end = AttemptEnd(placed.attempt.np, error, None if watch is None else watch.stop())
                    record.ended_at = time.time()
                    decision = decide(end, run.sizing, self.recovery.policy, failures)
                    state, placed, watch = decision.state, None, None
                case RunState.RESIZING:
                    record.rescaled = True
                    log.info(f"attempt {number} ended after {record.duration_s:.1f} s: {decision.why}")
                    state, number = RunState.PLACING, number + 1
                case RunState.RESTARTING:
                    assert end.error is not None
                    record.error = end.error
                    log.warning(failure_line(record, end.error, FailureDecision.RETRY))
                    if not run.sizing.elastic:  # wait for the executors lost with the attempt to come back
                        self._placements(
                            run.launcher, run.spark, run.sizing.least // run.ranks_per_task
                        ).check()
                    state, number, failures = RunState.PLACING, number + 1, failures + 1
                case RunState.SUCCEEDED:
                    if number:
                        log.info(f"attempt {number} succeeded")
                    return values
                case RunState.FAILED:
                    raise self._failed(run, record, end.error, decision.why)

    def _check(self, call: RunCall) -> _Run:
        """CHECKING: everything that can be refused before a process starts; then the run's record opens."""
        options = self.options
        deadline = RunDeadline.starting_now(options.timeout)
        payload = _function_payload(call.main, call.args, call.kwargs)
        launcher = resolve_launcher(options.launcher, call.main, options.horovod, options.env)
        spark = None if options.np < 0 else _spark_session(options.spark)
        per_task = _ranks_per_task(options.np, options.ranks_per_task, spark)
        sizing = Sizing(options.np, options.np_range, spark, per_task, options.start_timeout)
        self._placements(launcher, spark, sizing.least // per_task).check()
        _check_stream_feeders(
            (*call.args, *call.kwargs.values()), 0 if options.np < 0 else sizing.least // per_task
        )
        observers = Observers(self._observers)
        record = self._outputs.last_run = RunRecord(uuid.uuid4().hex, call.name, options.np, launcher.name)
        self._outputs.received_files = {}
        checkpoints = RunCheckpoints.open(self.recovery.checkpoint_dir, record.run_id, options.np < 0)
        env = {**observers.start(record), **options.env, **checkpoints.rank_env()}
        if call.every_rank:
            env[Env.RESULTS] = "all"
        zygotes = zygotes_for(record.run_id, call.main, options, launcher.name)
        return _Run(
            call,
            payload,
            launcher,
            spark,
            per_task,
            sizing,
            deadline,
            observers,
            record,
            checkpoints,
            env,
            zygotes,
        )

    def _new_attempt_record(self, run: _Run, number: int) -> AttemptRecord:
        """The record of attempt `number` (what `last_run.attempts`, MLflow and the report read), as it starts."""
        resumed = latest_step(run.checkpoints.folder) if number else None
        record = AttemptRecord(
            number,
            time.time(),
            resumed_from_step=resumed,
            attempt_id=Attempt.id_for(run.record.run_id, number),
        )
        run.record.attempts.append(record)
        if number:
            log.info(f"attempt {number} started{resume_text(resumed)}")
        return record

    def _place(self, run: _Run, number: int, record: AttemptRecord) -> tuple[_Placed | None, AttemptEnd]:
        """PLACING: the attempt's np, its placement (from the factory), channel and job; or why it cannot start."""
        np = 0
        try:
            np = record.world_size = run.sizing.np_for(number)
            if run.deadline is not None:
                run.deadline.refuse_start_when_passed(number)
            attempt = Attempt.of(run.record.run_id, number, np)
            placement = self._placements(run.launcher, run.spark, np // run.ranks_per_task)
            channel = AttemptChannel(
                run.payload,
                np,
                self.options.driver_log_verbosity,
                placement.bind_host,
                run.observers,
                server_port(placement.bind_host, self.options.port_range),
            )
            job = self._job(run, attempt, placement, channel)
        except BaseException as exc:  # nothing started: the policies read why
            return None, AttemptEnd(np, exc)
        placed = _Placed(attempt, placement, channel, job, job_description(run.record, attempt.id))
        return placed, AttemptEnd(np, None)

    def _job(self, run: _Run, attempt: Attempt, placement: Placement, channel: AttemptChannel) -> RankJob:
        """What every rank of `attempt` is given: where the driver is, its secret, its environment."""
        zygote = None
        if run.zygotes is not None:
            zygote = run.zygotes.spec(placement.bind_host, placement.driver_host, self.options)
        return RankJob(
            attempt.id,
            (placement.driver_host, channel.port),
            channel.secret,
            {**run.env, **self.recovery.rank_env(attempt.number)},
            self.options.horovod,
            self.options.use_gpu,
            port_range=self.options.port_range,
            ranks_per_task=run.ranks_per_task,
            zygote=zygote,
            run_id=run.record.run_id,
        )

    def _run_ranks(self, run: _Run, placed: _Placed) -> BaseException | None:
        """RUNNING: start the ranks and supervise them until the attempt ends; its error, or None."""
        stall = StallWatch(self.options.stall_timeout, self.options.on_stall)
        self._in_flight.publish(placed.channel)
        run.record.spark_job_group = placed.placement.job_group  # known while the attempt runs
        try:
            placed.placement.start(placed.job, placed.description)
            supervisor = Supervisor(
                placed.channel, placed.placement, self.options.start_timeout, run.deadline, stall
            )
            error: BaseException | None = error_of(supervisor.outcome())
        except BaseException as exc:  # a start that failed, or an interrupt while supervising
            error = exc
        if error is not None:
            log.debug("run %s: %s; shutting its ranks down", placed.attempt.id, type(error).__name__)
        return error

    def _stop(
        self, run: _Run, placed: _Placed, error: BaseException | None
    ) -> tuple[list[Any], BaseException | None]:
        """STOPPING: the ranks go as the stop policy decides, nothing of the attempt is left, and on success the
        values asked for are read; returns them and the attempt's error (None: it succeeded)."""
        stop = self.recovery.stop_policy
        channel, placement, attempt = placed.channel, placed.placement, placed.attempt
        try:
            if stop.decide(succeeded=error is None) is StopDecision.LET_EXIT:
                try:
                    _shut_down(channel, placement, attempt.id, StopDecision.LET_EXIT, stop.grace_s)
                    ranks = range(attempt.np) if run.call.every_rank else range(1)
                    return _results(channel, ranks), None
                except BaseException as exc:  # the ranks succeeded, but their end or their values failed
                    return [], exc
            assert error is not None
            causes.shut_down_after_failure(
                lambda: _shut_down(channel, placement, attempt.id, StopDecision.STOP, stop.grace_s), error
            )
            return [], error
        finally:
            self._in_flight.publish(None)
            self._outputs.received_files.update(channel.report.files)

    def _failed(
        self,
        run: _Run,
        record: AttemptRecord,
        error: BaseException | None,
        why: Resize | FailureDecision | None,
    ) -> BaseException:
        """FAILED: the error the run raises (the attempt's own without retries, else every attempt's)."""
        assert error is not None and isinstance(why, FailureDecision)
        record.error = error
        if why is FailureDecision.RAISE:
            return error
        log.warning(failure_line(record, error, why))
        final = final_error(run.record.attempts, self.recovery.policy, error)
        if final is not error:
            final.__cause__ = error
        return final


def _shut_down(
    channel: AttemptChannel, placement: Placement, attempt_id: str, how: StopDecision, stop_grace_s: float
) -> None:
    """Leave nothing behind: after a success let the ranks exit on their own first (not what they left: a daemon
    may hold mpirun up), otherwise stop them (SIGTERM, up to `stop_grace_s`) and kill what is left."""
    if how is StopDecision.LET_EXIT:
        deadline = time.monotonic() + EXIT_WAIT_S
        with channel.changed:  # a rank hanging up wakes it (a warm session's ranks stay up)
            while not (placement.finished() or channel.ranks_ended_here()) and time.monotonic() < deadline:
                channel.changed.wait(SUPERVISE_POLL_S / 2)
            # what a relay sent last may still wait in the driver's socket or handler queue: closing the channel
            # now would drop a rank's last lines
            causes.wait_until(channel, channel.output_delivered, OUTPUT_END_WAIT_S)
    else:
        channel.stop_ranks(stop_grace_s)
        log.debug("run %s: every rank stopped", attempt_id)
    placement.stop()
    log.debug("run %s: its placement ended", attempt_id)
    channel.close()
    leftover = processes.sweep_attempt(attempt_id, grace_s=SWEEP_GRACE_S)  # the attempt as a whole has ended
    if leftover:
        log.warning(
            "killed %d leftover process(es) of run %s: %s",
            len(leftover),
            attempt_id,
            processes.described(leftover),
        )


def _results(channel: AttemptChannel, ranks: Iterable[int]) -> list[Any]:
    values = []
    for rank in ranks:
        try:
            values.append(channel.result_value(rank))
        except Exception as exc:
            raise SparkRunnerError(
                f"rank {rank}'s return value could not be unpickled on the driver: {exc}. Return plain Python, "
                f"numpy or torch objects whose classes the driver can import."
            ) from exc
    return values


def _spark_session(given: Any) -> Any:
    """The SparkSession given, else the active or default one."""
    return given if given is not None else find_spark_session()


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


def job_description(record: RunRecord, attempt_id: str) -> str:
    """The run's barrier job in Spark's UI: what runs, how, its MLflow run, sparkrunner's run id and, after the
    first, the attempt's id."""
    mlflow = "" if record.mlflow_run_id is None else f" mlflow={record.mlflow_run_id}"
    return (
        f"sparkrunner: {record.function} np={record.np} launcher={record.launcher}{mlflow} run={record.run_id}"
        + ("" if attempt_id == record.run_id else f" attempt={attempt_id}")
    )


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
