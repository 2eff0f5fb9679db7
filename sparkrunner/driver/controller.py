"""The run's controller: one loop owns a run from its checks to its end, as an explicit state machine.

    Checking -> Placing -> AttemptRunning -> Stopping -> RunSucceeded | Resizing | Restarting | RunFailed
    Resizing -> Placing (the scaling policy grew the run), Restarting -> Placing (the failure policy retries);
    Placing -> Stopping when the attempt cannot start (docs/architecture.md draws it)

Each state is a value that carries its data (the run, the attempt's record and placement, how it ended, its error,
the resize); the loop hands it to its step, which does the work and returns the next. While an attempt runs, the
loop steps its supervisor and, between steps, asks the scaling policy whether the attempt grows (`Resize`) and
acts on a stop the caller asked for. How an attempt ended (`AttemptEnd`) goes to `decide`, which returns what the
loop does next: `Done`, `Resize`, `Retry` or `Fail(why)`. The policies decide and the loop acts: it reads the
cluster's slots, waits for them and stops the ranks. The scaling policy and each attempt's supervisor can be
passed in, and every state goes to the `on_state` hook, so a test can step the loop. The checks raise their typed
errors before any process starts; after that an attempt's error is a value the policies read, and only the run's
final error is raised (an interrupt as the interrupt it is).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sparkrunner.channel.payload import dumps_call
from sparkrunner.common.checkpoint_dir import RunCheckpoints
from sparkrunner.common.environment import Env
from sparkrunner.data.driver import check_stream_feeders
from sparkrunner.driver.attempt import teardown
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.attempt.stacks import StallWatch
from sparkrunner.driver.elastic import Resize, Sizing
from sparkrunner.driver.in_flight import InFlightWatch
from sparkrunner.driver.launcher_choice import resolve_launcher
from sparkrunner.driver.open_run import OpenRun, Placed, RunCall, RunOutputs
from sparkrunner.driver.retry_policy import (
    Done,
    Fail,
    RecoveryOptions,
    Retry,
    RetryPolicy,
    failure_line,
    run_error,
)
from sparkrunner.driver.supervisor import (
    Ended,
    RunDeadline,
    StillRunning,
    Supervises,
    Supervisor,
    SupervisorFactory,
    error_of,
)
from sparkrunner.driver.zygotes import zygotes_for
from sparkrunner.observe.observers import Observers, RunObserver, RunRecord
from sparkrunner.options import RunOptions
from sparkrunner.placement import Placement
from sparkrunner.placement.factory import PlacementFactory
from sparkrunner.placement.spark_sessions import find_spark_session, task_resource_amount
from sparkrunner.system.network import server_port
from sparkrunner.timeouts import ELASTIC_POLL_S, SUPERVISE_POLL_S
from sparkrunner.topology import ranks_per_task

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended, as the policies read it: its error (None: it succeeded), the resize the controller
    asked its ranks to stop for, and whether the caller asked it to stop."""

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
class Checking:
    """Arguments, launcher, Spark and slots are checked; the run's record opens."""

    call: RunCall
    outputs: RunOutputs = field(repr=False)


@dataclass(frozen=True)
class Placing:
    """Attempt `number` gets its np (`np`, else the scaling policy's), its placement, channel and job; after a
    failure (`regain_slots`) the cluster first gets back the slots it lost with the last attempt."""

    run: OpenRun = field(repr=False)
    number: int
    np: int | None = None
    regain_slots: bool = False


@dataclass(frozen=True)
class AttemptRunning:
    """The attempt's ranks start; the loop steps its supervisor and acts between steps until it ends."""

    run: OpenRun = field(repr=False)
    placed: Placed


@dataclass(frozen=True)
class Stopping:
    """The attempt ended (`end`): its ranks go, its placement ends, its results are read; `placed` None: it
    never started, and `end` says why."""

    run: OpenRun = field(repr=False)
    placed: Placed | None
    end: AttemptEnd


@dataclass(frozen=True)
class Resizing:
    """The attempt ended for a larger np (`resize`, not a failure): the next attempt runs `resize.new` ranks."""

    run: OpenRun = field(repr=False)
    resize: Resize


@dataclass(frozen=True)
class Restarting:
    """The attempt failed and the failure policy retries (`retry`, with the attempt's error)."""

    run: OpenRun = field(repr=False)
    retry: Retry


@dataclass(frozen=True)
class RunSucceeded:
    """The run's values: rank 0's, or every rank's."""

    run: OpenRun = field(repr=False)
    values: list[Any]


@dataclass(frozen=True)
class RunFailed:
    """The run ends with the attempt's error, as the failure policy decided (`fail`: the error and why)."""

    run: OpenRun = field(repr=False)
    fail: Fail


Opened = Placing | AttemptRunning | Stopping | Resizing | Restarting | RunSucceeded | RunFailed
"""Where a run is once its record opened."""
State = Checking | Opened
"""Where a run is."""


class RunController:
    """Owns each run of a pipeline (`RunPipeline`, a warm session's): its states, its attempts and their
    placements, made by the placement factory it holds. Each run keeps its own state (runs may come from several
    threads); `on_state` sees every state each run enters, in order."""

    def __init__(
        self,
        options: RunOptions,
        observers: Sequence[RunObserver],
        placements: PlacementFactory,
        in_flight: InFlightWatch,
        scaling: Callable[[int], Sizing] | None = None,
        supervisor: SupervisorFactory | None = None,
        on_state: Callable[[State], None] | None = None,
    ) -> None:
        self.options = options
        self.recovery = RecoveryOptions.of(options)
        """The recovery options, derived once: the failure policy decides with them (`Runner.recovery`)."""
        self._scaling = scaling or (lambda per_task: Sizing(options.np, options.np_range, per_task))

        def supervise(
            channel: AttemptChannel, placement: Placement, deadline: RunDeadline | None
        ) -> Supervisor:
            stall = StallWatch(options.stall_timeout, options.on_stall)
            return Supervisor(channel, placement, options.start_timeout, deadline, stall)

        self._supervisor = supervisor or supervise
        self._observers = list(observers)
        self._placements = placements
        self._in_flight = in_flight
        self._on_state = on_state

    def run(self, call: RunCall, outputs: RunOutputs) -> list[Any]:
        """`call` on every rank: rank 0's value (or every rank's) in a list, or the run's error raised; `outputs`
        gets the run's record as it opens, and the files its ranks sent."""
        state: State = Checking(call, outputs)
        try:
            while True:
                self._enter(state)
                match state:
                    case Checking():
                        state = self._check(state)  # typed errors, before any process starts
                    case Placing():
                        state = self._place(state)
                    case AttemptRunning():
                        state = self._supervise(state)
                    case Stopping():
                        state = self._stop(state)
                    case Resizing():
                        state = self._resize(state)
                    case Restarting():
                        state = self._restart(state)
                    case RunSucceeded():
                        return self._succeeded(state)
                    case RunFailed():
                        raise self._failed(state)
        except BaseException as exc:
            if not isinstance(state, Checking):  # the run's record is open
                self._end(state, exc)
            raise

    def ask_to_stop(self, reason: str) -> bool:
        """Ask the ranks of the attempt in flight to stop gracefully (the loop acts on it); False when none is."""
        channel = self._in_flight.channel
        if channel is not None:
            channel.request_stop(reason)
        return channel is not None

    def _enter(self, state: State) -> None:
        log.debug("run: %s", state)
        if self._on_state is not None:
            self._on_state(state)

    def _end(self, state: Opened, error: BaseException | None) -> None:
        """The run's end, however it came: what an attempt left behind goes (an interrupt landing between two
        steps), the observers see the record, the checkpoints and zygotes close."""
        run = state.run
        try:
            placed = state.placed if isinstance(state, AttemptRunning | Stopping) else None
            if placed is not None:  # an attempt in flight
                teardown.kill_now(placed.channel, placed.placement, run.attempt.attempt_id)
        finally:
            try:
                run.observers.end(run.record, error)
            finally:
                run.close()

    def _check(self, state: Checking) -> Placing:
        """Checking: everything that can be refused before a process starts; then the run's record opens."""
        options, call = self.options, state.call
        deadline = RunDeadline.starting_now(options.timeout)
        payload = dumps_call(call.main, call.args, call.kwargs)
        launcher = resolve_launcher(options.launcher, call.main, options.horovod, options.env)
        spark = None if options.np < 0 else options.spark or find_spark_session()
        gpus = 0.0 if spark is None or options.ranks_per_task is not None else task_resource_amount(spark)
        per_task = ranks_per_task(options.np, options.ranks_per_task, gpus)
        sizing = self._scaling(per_task)
        least_tasks = sizing.least // per_task
        self._placements.check(launcher, spark, least_tasks)
        feeders_beside = 0 if spark is None else least_tasks  # a stream's feeders need slots beside them
        check_stream_feeders((*call.args, *call.kwargs.values()), feeders_beside)
        observers = Observers(self._observers)
        record = RunRecord(uuid.uuid4().hex, call.name, options.np, launcher.name)
        state.outputs.last_run, state.outputs.received_files = record, {}
        checkpoints = RunCheckpoints.open(self.recovery.checkpoint_dir, record.run_id, options.np < 0)
        env = {**observers.start(record), **options.env, **checkpoints.rank_env()}
        if call.every_rank:
            env[Env.RESULTS] = "all"
        zygotes = zygotes_for(record.run_id, call.main, options, launcher.name)
        run = OpenRun(
            call, state.outputs, payload, launcher, spark, per_task, sizing, deadline, observers, record,
            checkpoints, env, zygotes,
        )  # fmt: skip
        return Placing(run, 0)

    def _place(self, state: Placing) -> AttemptRunning | Stopping:
        """Placing: the attempt's record, np, placement (from the factory), channel and job; or why it cannot start
        (a slot wait that failed or was interrupted included)."""
        run, number = state.run, state.number
        record = run.start_attempt(number)
        try:
            if state.regain_slots:  # the executors lost with the last attempt come back
                self._placements.check(run.launcher, run.spark, run.sizing.least // run.ranks_per_task)
            if state.np is None:
                record.world_size = run.np_for(number, self.options.start_timeout)
            else:  # the resize's
                record.world_size = state.np
                run.sizing.announce(number, state.np)
            if run.deadline is not None:
                run.deadline.refuse_start_when_passed(number)
            placement = self._placements(run.launcher, run.spark, record.world_size // run.ranks_per_task)
            channel = AttemptChannel(
                run.payload,
                record.world_size,
                self.options.driver_log_verbosity,
                placement.bind_host,
                run.observers,
                server_port(placement.bind_host, self.options.port_range),
            )
            job = run.job(placement, channel, self.options, self.recovery)
        except BaseException as exc:  # nothing started: the policies read why
            return Stopping(run, None, AttemptEnd(exc))
        return AttemptRunning(run, Placed(placement, channel, job))

    def _supervise(self, state: AttemptRunning) -> Stopping:
        """AttemptRunning: start the ranks, then step the supervisor, acting between steps, until the attempt
        ends (its error, an interrupt included, is a value)."""
        run, placed = state.run, state.placed
        self._in_flight.publish(placed.channel)
        run.record.spark_job_group = placed.placement.job_group  # known while the attempt runs
        acted = _Acted()
        try:
            placed.placement.start(placed.job, run.job_description())
            supervisor = self._supervisor(placed.channel, placed.placement, run.deadline)
            error: BaseException | None = error_of(self._steps(run, placed, supervisor, acted))
        except BaseException as exc:  # a start that failed, or an interrupt while supervising
            error = exc
        if error is not None:
            log.debug("attempt %s: %s; shutting its ranks down", run.attempt.attempt_id, type(error).__name__)
        end = AttemptEnd(error, acted.resize, acted.stop_asked)
        return Stopping(run, placed, end)

    def _steps(self, run: OpenRun, placed: Placed, supervisor: Supervises, acted: _Acted) -> Ended:
        """Step `supervisor` until the attempt ends; between steps, act on a stop asked and ask the scaling policy
        (at most every ELASTIC_POLL_S) whether the attempt grows."""
        channel, next_look = placed.channel, 0.0
        with channel.changed:
            while True:
                outcome = supervisor.step()
                if not isinstance(outcome, StillRunning):
                    return outcome
                if channel.stop_requested is not None:
                    acted.stop(channel, channel.stop_requested)
                if acted.may_grow and run.sizing.can_grow(run.np) and time.monotonic() >= next_look:
                    next_look = time.monotonic() + ELASTIC_POLL_S
                    channel.changed.release()  # reading the cluster's slots may take a while: ranks go on meanwhile
                    try:
                        acted.grow(run, placed)
                    finally:
                        channel.changed.acquire()
                channel.changed.wait(SUPERVISE_POLL_S)

    def _stop(self, state: Stopping) -> RunSucceeded | Resizing | Restarting | RunFailed:
        """Stopping: the ranks go and nothing of the attempt is left (after a success they exit on their own and
        the values asked for are read; a second Ctrl-C cuts the shutdown short). Then the policies decide what the
        loop does next."""
        run, record, end = state.run, state.run.attempt, state.end
        values: list[Any] = []
        if (placed := state.placed) is not None:
            channel, grace_s = placed.channel, self.recovery.stop_grace_s
            values_of = range(run.np) if run.call.every_rank else range(1)
            try:
                values, error = teardown.end_attempt(
                    channel, placed.placement, run.attempt.attempt_id, end.error, values_of, grace_s
                )
            finally:
                self._in_flight.publish(None)
                run.outputs.received_files.update(channel.report.files)
            end = replace(end, error=error)
        record.ended_at = time.time()
        decision = decide(end, self.recovery.policy, run.failed_before())
        match decision:
            case Done():
                return RunSucceeded(run, values)
            case Resize():
                return Resizing(run, decision)
            case Retry():
                return Restarting(run, decision)
            case Fail():
                return RunFailed(run, decision)

    def _resize(self, state: Resizing) -> Placing:
        """Resizing: not a failure; the next attempt runs the np the resize decided."""
        record = state.run.attempt
        record.rescaled = True
        log.info(f"attempt {record.number} ended after {record.duration_s:.1f} s: {state.resize}")
        return Placing(state.run, record.number + 1, np=state.resize.new)

    def _restart(self, state: Restarting) -> Placing:
        """Restarting: the failure is logged; the next attempt waits for the slots a fixed-size run lost."""
        record = state.run.attempt
        record.error = state.retry.error
        log.warning(failure_line(record, state.retry))
        return Placing(state.run, record.number + 1, regain_slots=not state.run.sizing.elastic)

    def _succeeded(self, state: RunSucceeded) -> list[Any]:
        if state.run.attempt.number:
            log.info(f"attempt {state.run.attempt.number} succeeded")
        self._end(state, None)
        return state.values

    def _failed(self, state: RunFailed) -> BaseException:
        """RunFailed: the error the run raises, as the failure policy words it."""
        state.run.attempt.error = state.fail.error
        return run_error(state.fail, state.run.record.attempts, self.recovery.policy)


@dataclass
class _Acted:
    """What the loop did on a running attempt: the resize it asked the ranks to stop for, or a stop asked (once
    either happened the ranks are stopping: nothing more is asked of them)."""

    resize: Resize | None = None
    stop_asked: bool = False
    may_grow: bool = True
    """False once the cluster could not say its slots (it is going away: the attempt will say why)."""

    def stop(self, channel: AttemptChannel, reason: str) -> None:
        if self.resize is None and not self.stop_asked:
            self.stop_asked = True
            channel.ask_ranks_to_stop(reason)

    def grow(self, run: OpenRun, placed: Placed) -> None:
        """Ask the scaling policy whether the attempt grows into the slots there are now; ask the ranks to stop
        for the resize it decides."""
        if self.resize is not None or self.stop_asked:
            return
        try:
            slots = run.slots()
        except Exception:
            self.may_grow = False
            return
        self.resize = run.sizing.grow(run.np, slots, len(placed.channel.report.ranks))
        if self.resize is not None:
            log.info("slots for %d ranks are back: the run grows at its next checkpoint", self.resize.new)
            placed.channel.ask_ranks_to_stop("rescale")  # `stop_reason`: they save and return
