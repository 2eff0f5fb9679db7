"""The run's controller: one loop owns a run from its checks to its end, as an explicit state machine.

    Checking -> Placing -> Running -> Stopping -> Succeeded | Resizing | Restarting | Failed
    Resizing -> Placing (the scaling policy grew the run), Restarting -> Placing (the failure policy retries);
    Placing -> Stopping when the attempt cannot start (docs/architecture.md draws it)

Each state is a value that carries its data (the run, the attempt's placement, how it ended, its error, the
resize); the loop hands it to its step, which does the work and returns the next. While an attempt runs, the loop
steps its supervisor and acts on its events: a larger np its grow watch proposes (the scaling policy decides:
`Resize`), a stop the caller asks for. How an attempt ended (`AttemptEnd`) goes to `decide`, which returns what
the loop does next: `Done`, `Resize`, `Retry` or `Fail(why)`. The policies are passed in (`Policies`) and every
state goes to the `on_state` hook, so a test can step the loop. The checks raise their typed errors before any
process starts; after that an attempt's error is a value the policies read, and only the run's final error is
raised (an interrupt as the interrupt it is).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sparkrunner.channel.environment import Env
from sparkrunner.channel.payload import dumps_call
from sparkrunner.common.checkpoint_dir import RunCheckpoints, latest_step
from sparkrunner.data.driver import check_stream_feeders
from sparkrunner.driver.attempt import teardown
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.attempt.stacks import StallWatch
from sparkrunner.driver.attempts import (
    Done,
    Fail,
    RecoveryOptions,
    Retry,
    RetryPolicy,
    Why,
    failure_line,
    final_error,
    interrupted_note,
    resume_text,
)
from sparkrunner.driver.elastic import Resize, Sizing
from sparkrunner.driver.in_flight import InFlightWatch
from sparkrunner.driver.supervisor import Ended, Outcome, RunDeadline, Supervisor, error_of
from sparkrunner.driver.supervisor import Running as Undecided
from sparkrunner.driver.zygotes import Zygotes, zygotes_for
from sparkrunner.launch import Launcher, RankJob
from sparkrunner.launch.driver import resolve_launcher
from sparkrunner.observe.observers import AttemptRecord, Observers, RunObserver, RunRecord
from sparkrunner.options import RunOptions
from sparkrunner.placement import Placement
from sparkrunner.placement.factory import PlacementFactory
from sparkrunner.placement.sessions import find_spark_session, task_resource_amount
from sparkrunner.placement.spark import job_description
from sparkrunner.system.network import server_port
from sparkrunner.timeouts import SUPERVISE_POLL_S
from sparkrunner.topology import ranks_per_task

log = logging.getLogger(__name__)


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
    it succeeded), the resize the controller asked its ranks to stop for, and whether the caller asked it to
    stop."""

    np: int
    error: BaseException | None
    resize: Resize | None = None
    stop_asked: bool = False


Decision = Done | Resize | Retry | Fail
"""What the loop does next after an attempt ended."""


def decide(end: AttemptEnd, failures: RetryPolicy, failed_before: int) -> Decision:
    """After an attempt ended, `failed_before` attempts having failed before it: an attempt stopped for a resize
    resizes whatever its ranks did then (short of an interrupt), a success is done, a failure is the failure
    policy's to decide."""
    interrupted = end.error is not None and not isinstance(end.error, Exception)
    if end.resize is not None and not interrupted:
        return end.resize
    if end.error is None:
        return Done()
    return failures.decide(end.error, failed_before, end.stop_asked)


@dataclass(frozen=True)
class GrowProposed:
    """An event of a running attempt: its grow watch found slots for `np` ranks."""

    np: int


@dataclass(frozen=True)
class StopAsked:
    """An event of a running attempt: the caller asked its ranks to stop (`Runner.ask_to_stop`), for `reason`."""

    reason: str


Event = GrowProposed | StopAsked


class _Inbox:
    """The events of the attempt in flight, put from other threads; putting one wakes the controller's loop."""

    def __init__(self, channel: AttemptChannel) -> None:
        self._channel = channel
        self._events: list[Event] = []
        self._lock = threading.Lock()

    def put(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)
        with self._channel.changed:
            self._channel.changed.notify_all()

    def take(self) -> list[Event]:
        with self._lock:
            events, self._events = self._events, []
        return events


class Supervises(Protocol):
    """What the loop steps while an attempt runs (`Supervisor`, or a test's stand-in)."""

    def step(self) -> Outcome: ...


SupervisorFactory = Callable[[AttemptChannel, Placement, "RunDeadline | None"], Supervises]
"""The supervisor of one attempt, for its channel, its placement and the run's deadline."""


@dataclass(frozen=True)
class Policies:
    """What the controller asks for its decisions and its supervision, passed in so that a test can step the
    loop with its own: the failure policy, the scaling policy (made once Spark and the ranks per task are known)
    and each attempt's supervisor."""

    failures: RetryPolicy
    scaling: Callable[[Any, int], Sizing]
    supervisor: SupervisorFactory

    @classmethod
    def of(cls, options: RunOptions) -> Policies:
        """Runner's: `max_failures` and `retry_if`, `np` or its range, the timeouts and the stall watch."""

        def scaling(spark: Any, per_task: int) -> Sizing:
            return Sizing(options.np, options.np_range, spark, per_task, options.start_timeout)

        def supervisor(
            channel: AttemptChannel, placement: Placement, deadline: RunDeadline | None
        ) -> Supervisor:
            stall = StallWatch(options.stall_timeout, options.on_stall)
            return Supervisor(channel, placement, options.start_timeout, deadline, stall)

        return cls(RecoveryOptions.of(options).policy, scaling, supervisor)


@dataclass
class RunOutputs:
    """What a caller reads after a run: its record (set as the run opens) and the files its ranks sent."""

    last_run: RunRecord | None = None
    received_files: dict[str, str] = field(default_factory=dict)


@dataclass
class _Run:
    """What every attempt of one run shares, from Checking on."""

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


@dataclass(frozen=True)
class Checking:
    """Arguments, launcher, Spark and slots are checked; the run's record opens."""

    call: RunCall


@dataclass(frozen=True)
class Placing:
    """Attempt `number` gets its np (`np`, else the scaling policy's), its placement, channel and job; after a
    failure (`wait_for_slots`) the cluster first gets back the slots it lost with the last attempt."""

    run: _Run = field(repr=False)
    number: int
    failures: int
    np: int | None = None
    wait_for_slots: bool = False


@dataclass(frozen=True)
class Running:
    """The attempt's ranks start; the loop steps its supervisor and acts on its events until it ends."""

    run: _Run = field(repr=False)
    record: AttemptRecord
    placed: _Placed
    failures: int


@dataclass(frozen=True)
class Stopping:
    """The attempt ended (`end`): its ranks go, its placement ends, its results are read; `placed` None: it
    never started, and `end` says why."""

    run: _Run = field(repr=False)
    record: AttemptRecord
    placed: _Placed | None
    end: AttemptEnd
    failures: int


@dataclass(frozen=True)
class Resizing:
    """The attempt ended for a larger np (`resize`, not a failure): the next attempt runs `resize.new` ranks."""

    run: _Run = field(repr=False)
    record: AttemptRecord
    resize: Resize
    failures: int


@dataclass(frozen=True)
class Restarting:
    """The attempt failed and the failure policy retries (`retry`, with the attempt's error)."""

    run: _Run = field(repr=False)
    record: AttemptRecord
    retry: Retry
    failures: int


@dataclass(frozen=True)
class Succeeded:
    """The run's values: rank 0's, or every rank's."""

    run: _Run = field(repr=False)
    record: AttemptRecord
    values: list[Any]


@dataclass(frozen=True)
class Failed:
    """The run ends with the attempt's error, as the failure policy decided (`fail`: the error and why)."""

    run: _Run = field(repr=False)
    record: AttemptRecord
    fail: Fail


Opened = Placing | Running | Stopping | Resizing | Restarting | Succeeded | Failed
"""Where a run is once its record opened."""
State = Checking | Opened
"""Where a run is."""


class RunController:
    """Owns each run of a pipeline (`RunPipeline`, a warm session's): its states, its attempts and their
    placements, made by the placement factory it holds. Runs from several threads keep their own state;
    `on_state` sees every state each run enters, in order."""

    def __init__(
        self,
        options: RunOptions,
        observers: Sequence[RunObserver],
        placements: PlacementFactory,
        in_flight: InFlightWatch,
        outputs: RunOutputs,
        policies: Policies | None = None,
        on_state: Callable[[State], None] | None = None,
    ) -> None:
        self.options = options
        self.recovery = RecoveryOptions.of(options)
        self.policies = policies or Policies.of(options)
        self._observers = list(observers)
        self._placements = placements
        self._in_flight = in_flight
        self._outputs = outputs
        self._on_state = on_state
        self._inbox: _Inbox | None = None

    def run(self, call: RunCall) -> list[Any]:
        """`call` on every rank: rank 0's value (or every rank's) in a list, or the run's error raised."""
        state: State = Checking(call)
        try:
            while True:
                self._enter(state)
                match state:
                    case Checking():
                        state = self._check(state)  # typed errors, before any process starts
                    case Placing():
                        state = self._place(state)
                    case Running():
                        state = self._supervise(state)
                    case Stopping():
                        state = self._stop(state)
                    case Resizing():
                        state = self._resize(state)
                    case Restarting():
                        state = self._restart(state)
                    case Succeeded():
                        return self._succeeded(state)
                    case Failed():
                        raise self._failed(state)
        except BaseException as exc:
            if not isinstance(state, Checking):  # the run's record is open
                self._end(state, exc)
            raise

    def ask_to_stop(self, reason: str) -> bool:
        """Ask the ranks of the attempt in flight to stop gracefully (an event of the loop); False when none is."""
        inbox = self._inbox
        if inbox is not None:
            inbox.put(StopAsked(reason))
        return inbox is not None

    def _enter(self, state: State) -> None:
        log.debug("run: %s", state)
        if self._on_state is not None:
            self._on_state(state)

    def _end(self, state: Opened, error: BaseException | None) -> None:
        """The run's end, however it came: what an attempt left behind goes (an interrupt landing between two
        steps), the observers see the record, the checkpoints and zygotes close."""
        try:
            placed = state.placed if isinstance(state, Running | Stopping) else None
            if placed is not None:  # an attempt in flight
                teardown.kill_now(placed.channel, placed.placement, placed.attempt.id)
        finally:
            try:
                state.run.observers.end(state.run.record, error)
            finally:
                state.run.close()

    def _check(self, state: Checking) -> Placing:
        """Checking: everything that can be refused before a process starts; then the run's record opens."""
        options, call = self.options, state.call
        deadline = RunDeadline.starting_now(options.timeout)
        payload = dumps_call(call.main, call.args, call.kwargs)
        launcher = resolve_launcher(options.launcher, call.main, options.horovod, options.env)
        spark = (
            None if options.np < 0 else options.spark if options.spark is not None else find_spark_session()
        )
        gpus = 0.0 if spark is None or options.ranks_per_task is not None else task_resource_amount(spark)
        per_task = ranks_per_task(options.np, options.ranks_per_task, gpus)
        sizing = self.policies.scaling(spark, per_task)
        self._placements(launcher, spark, sizing.least // per_task).check()
        check_stream_feeders(
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
        run = _Run(
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
        return Placing(run, 0, 0)

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

    def _place(self, state: Placing) -> Running | Stopping:
        """Placing: the attempt's np, its placement (from the factory), channel and job; or why it cannot start
        (a slot wait that failed or was interrupted included)."""
        run, number = state.run, state.number
        record = self._new_attempt_record(run, number)
        np = 0
        try:
            if state.wait_for_slots:  # the executors lost with the last attempt come back
                self._placements(run.launcher, run.spark, run.sizing.least // run.ranks_per_task).check()
            if state.np is None:
                np = record.world_size = run.sizing.np_for(number)
            else:  # the resize's
                np = record.world_size = state.np
                run.sizing.announce(number, np)
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
            return Stopping(run, record, None, AttemptEnd(np, exc), state.failures)
        opened = run.record
        description = job_description(
            opened.function,
            opened.np,
            opened.launcher,
            opened.run_id,
            opened.mlflow_run_id,
            (number, attempt.id),
        )
        placed = _Placed(attempt, placement, channel, job, description)
        return Running(run, record, placed, state.failures)

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

    def _supervise(self, state: Running) -> Stopping:
        """Running: start the ranks, then step the supervisor, acting on the attempt's events between steps,
        until the attempt ends (its error, an interrupt included, is a value)."""
        run, placed = state.run, state.placed
        inbox = self._inbox = _Inbox(placed.channel)
        self._in_flight.publish(placed.channel)
        run.record.spark_job_group = placed.placement.job_group  # known while the attempt runs
        acted = _Acted()
        watch = None
        try:
            placed.placement.start(placed.job, placed.description)
            supervisor = self.policies.supervisor(placed.channel, placed.placement, run.deadline)
            watch = run.sizing.watch(
                placed.attempt.np, placed.channel, lambda np: inbox.put(GrowProposed(np))
            )
            error: BaseException | None = error_of(self._steps(run, placed, supervisor, inbox, acted))
        except BaseException as exc:  # a start that failed, or an interrupt while supervising
            error = exc
        finally:
            self._inbox = None
            if watch is not None:
                watch.stop()
        if error is not None:
            log.debug("run %s: %s; shutting its ranks down", placed.attempt.id, type(error).__name__)
        end = AttemptEnd(placed.attempt.np, error, acted.resize, acted.stop_asked)
        return Stopping(run, state.record, placed, end, state.failures)

    def _steps(
        self, run: _Run, placed: _Placed, supervisor: Supervises, inbox: _Inbox, acted: _Acted
    ) -> Ended:
        """Step `supervisor` until the attempt ends; between steps, decide and execute what its events ask."""
        channel = placed.channel
        with channel.changed:
            while True:
                outcome = supervisor.step()
                if not isinstance(outcome, Undecided):
                    return outcome
                for event in inbox.take():
                    self._act(run, placed, event, acted)
                channel.changed.wait(SUPERVISE_POLL_S)

    @staticmethod
    def _act(run: _Run, placed: _Placed, event: Event, acted: _Acted) -> None:
        """A grow the scaling policy takes, or a stop asked: the ranks are asked to stop (once) and the loop
        remembers why."""
        if acted.resize is not None or acted.stop_asked:
            return
        match event:
            case GrowProposed(np=proposed):
                acted.resize = run.sizing.grow(placed.attempt.np, proposed)
                if acted.resize is not None:
                    log.info("slots for %d ranks are back: the run grows at its next checkpoint", proposed)
                    placed.channel.ask_ranks_to_rescale()
            case StopAsked(reason=reason):
                acted.stop_asked = True
                placed.channel.ask_ranks_to_stop(reason)

    def _stop(self, state: Stopping) -> Succeeded | Resizing | Restarting | Failed:
        """Stopping: the ranks go and nothing of the attempt is left; on success the values asked for are read.
        Then the policies decide what the loop does next."""
        run, record, end = state.run, state.record, state.end
        values: list[Any] = []
        if state.placed is not None:
            values, error = self._end_attempt(run, state.placed, end.error)
            end = replace(end, error=error)
        record.ended_at = time.time()
        decision = decide(end, self.policies.failures, state.failures)
        match decision:
            case Done():
                return Succeeded(run, record, values)
            case Resize():
                return Resizing(run, record, decision, state.failures)
            case Retry():
                return Restarting(run, record, decision, state.failures)
            case Fail():
                return Failed(run, record, decision)

    def _end_attempt(
        self, run: _Run, placed: _Placed, error: BaseException | None
    ) -> tuple[list[Any], BaseException | None]:
        """After a success let the ranks exit and read their values; otherwise stop them. Returns the values and
        the attempt's error (None: it succeeded); a second Ctrl-C cuts the shutdown short."""
        channel, placement, attempt = placed.channel, placed.placement, placed.attempt
        try:
            if error is None:
                try:
                    teardown.after_success(channel, placement, attempt.id)
                    return channel.result_values(range(attempt.np) if run.call.every_rank else range(1)), None
                except BaseException as exc:  # the ranks succeeded, but their end or their values failed
                    if not isinstance(exc, Exception):
                        teardown.kill_now(channel, placement, attempt.id)
                    return [], exc
            grace_s = self.recovery.stop_grace_s
            return [], teardown.after_failure(channel, placement, attempt.id, grace_s, error)
        finally:
            self._in_flight.publish(None)
            self._outputs.received_files.update(channel.report.files)

    def _resize(self, state: Resizing) -> Placing:
        """Resizing: not a failure; the next attempt runs the np the resize decided."""
        state.record.rescaled = True
        log.info(f"attempt {state.record.number} ended after {state.record.duration_s:.1f} s: {state.resize}")
        return Placing(state.run, state.record.number + 1, state.failures, np=state.resize.new)

    def _restart(self, state: Restarting) -> Placing:
        """Restarting: the failure is logged; the next attempt waits for the slots a fixed-size run lost."""
        state.record.error = state.retry.error
        log.warning(failure_line(state.record, state.retry))
        fixed = not state.run.sizing.elastic
        return Placing(state.run, state.record.number + 1, state.failures + 1, wait_for_slots=fixed)

    def _succeeded(self, state: Succeeded) -> list[Any]:
        if state.record.number:
            log.info(f"attempt {state.record.number} succeeded")
        self._end(state, None)
        return state.values

    def _failed(self, state: Failed) -> BaseException:
        """Failed: the error the run raises: an interrupt as it is (noting what the attempts before it did), the
        attempt's own without retries, else every attempt's."""
        record, error = state.record, state.fail.error
        record.error = error
        attempts = state.run.record.attempts
        if state.fail.why is Why.INTERRUPTED:
            if len(attempts) > 1:
                error.add_note(interrupted_note(attempts))
            return error
        if state.fail.why is Why.NO_RETRIES:
            return error
        log.warning(failure_line(record, state.fail))
        final = final_error(attempts, self.policies.failures, error)
        if final is not error:
            final.__cause__ = error
        return final


@dataclass
class _Acted:
    """What the loop did on a running attempt's events: the resize it asked the ranks to stop for, or a stop."""

    resize: Resize | None = None
    stop_asked: bool = False
