"""Run observers: optional features (tracking, progress) that follow a run without the runner knowing them.

An observer sees the run start, adds variables to every rank's environment, is told (by typed hooks) what
the ranks print, log, report and send, and how each ended, and sees the run end. Each writes what it learned onto the shared `RunRecord`, in order, so a
later observer (tracking) can use what an earlier one (progress timings) recorded.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkrunner.observe.timings import rank_throughput

if TYPE_CHECKING:
    import pandas as pd

    from sparkrunner.errors import RankFailedError
    from sparkrunner.observe.events import AnatomyEvent, LaunchEvent, ProgressEvent

log = logging.getLogger(__name__)


@dataclass
class AttemptRecord:
    """One attempt of a run (`Runner.last_run.attempts`).

    Attributes:
        number: 0 for the first attempt, as `rank_context().attempt` says on its ranks.
        started_at: wall-clock start (seconds since the epoch).
        ended_at: wall-clock end, or None while it runs.
        error: what ended it, or None when it succeeded.
        resumed_from_step: the step of the latest checkpoint when it started, or None when there was none.
        world_size: its ranks (with ``np=(min, max)`` each attempt's own).
        rescaled: True when it ended because the run changed its size (not a failure).
        attempt_id: the id every process of the attempt carries (`SPARKRUNNER_ATTEMPT_ID`),
            ``<run_id>-attempt<number>`` (never the run's own id, also for attempt 0).
    """

    number: int
    started_at: float
    ended_at: float | None = None
    error: BaseException | None = None
    resumed_from_step: int | None = None
    world_size: int | None = None
    rescaled: bool = False
    attempt_id: str = ""

    @property
    def duration_s(self) -> float | None:
        return None if self.ended_at is None else self.ended_at - self.started_at

    @staticmethod
    def id_for(run_id: str, number: int) -> str:
        """The id of attempt `number` of run `run_id`: derived from the run's, never equal to it."""
        return f"{run_id}-attempt{number}"


@dataclass
class RunRecord:
    """What one `run()` did; `Runner.last_run` after the call returns or raises.

    Attributes:
        run_id: sparkrunner's id of the run (every rank process carries it).
        function: the name of the function that ran.
        np: the ``np`` the run was started with.
        launcher: the launcher that started the ranks.
        started_at: wall-clock start (seconds since the epoch).
        duration_s: seconds from start to the end of the run.
        error: the exception `run()` raised, or None when it succeeded.
        timings: one row per progress report (see `sparkrunner.progress`), or None without reports.
        mlflow_run_id: the MLflow run that recorded this run, or None when tracking is off.
        attempts: one `AttemptRecord` (start, end, error) per attempt; more than one with ``max_failures``.
        step_anatomy: per rank, the median and p95 seconds of each part of its steps (data, comm, compute,
            own = step - comm, step), or None when no rank counted steps (`sparkrunner.observe.anatomy`).
        report_path: the run's HTML report (throughput and step anatomy per rank), or None.
        spark_job_group: the Spark job group (a job tag on Spark Connect) of the current or last attempt's
            barrier job, set when it starts: ``sc.cancelJobGroup(group)`` stops the run (`RunCancelledError`).
    """

    run_id: str
    function: str
    np: int
    launcher: str
    started_at: float = field(default_factory=time.time)
    duration_s: float | None = None
    error: BaseException | None = None
    timings: pd.DataFrame | None = None
    mlflow_run_id: str | None = None
    attempts: list[AttemptRecord] = field(default_factory=list)
    spark_job_group: str | None = None
    step_anatomy: pd.DataFrame | None = None
    report_path: str | None = None

    def rank_throughput(self) -> pd.DataFrame | None:
        """Per-rank steps, seconds per step and steps (and samples) per second; slowest rank first."""
        return None if self.timings is None else rank_throughput(self.timings)

    @property
    def slowest_rank(self) -> int | None:
        """The rank with the longest median step time, or None without progress reports."""
        table = self.rank_throughput()
        return None if table is None or table.empty else int(table.index[0])


class RunObserver:
    """Base class of run observers; every hook is optional. Hooks run on the driver (the `on_rank_*`,
    `on_progress` and `on_file` hooks on the channel's threads, one per rank connection)."""

    def on_start(self, record: RunRecord) -> None:
        """Called before any rank starts."""

    def rank_env(self) -> dict[str, str]:
        """Extra environment variables for every rank (read after `on_start`)."""
        return {}

    def on_rank_launch(self, rank: int, launch: LaunchEvent) -> None:
        """How a rank's start went, just before `on_rank_start` (when the rank timed it)."""

    def on_rank_start(self, rank: int) -> None:
        """A rank's process started and connected to the driver (it loads the function next)."""

    def on_progress(self, rank: int, progress: ProgressEvent) -> None:
        """A rank reported a finished training step (`sparkrunner.report_progress`)."""

    def on_anatomy(self, rank: int, anatomy: AnatomyEvent) -> None:
        """A rank summed up where a window of its steps went (`sparkrunner.ranks.anatomy`)."""

    def on_rank_output(self, rank: int, stream: str, lines: list[str]) -> None:
        """Lines a rank printed on `stream` ("stdout" or "stderr"), whatever `driver_log_verbosity` is."""

    def on_rank_log(self, rank: int, text: str) -> None:
        """A rank called `sparkrunner.log_to_driver(text)`."""

    def on_file(self, rank: int, name: str, path: str) -> None:
        """A rank sent file `name` (`send_file_to_driver`); the driver saved it at `path`."""

    def on_rank_exit(self, rank: int, error: RankFailedError | None) -> None:
        """A rank reported how its function ended: None when it returned, else the error it raised."""

    def on_end(self, record: RunRecord) -> None:
        """Called once after every rank is gone; `record.error` tells how the run ended."""


class Observers(RunObserver):
    """The observers of one run, called in order; a failing observer is logged and never fails the run."""

    def __init__(self, observers: list[RunObserver]) -> None:
        self._observers = observers
        self._started = 0.0

    def start(self, record: RunRecord) -> dict[str, str]:
        """Start every observer; return the environment they add to the ranks."""
        self._started = time.monotonic()
        env: dict[str, str] = {}
        for observer in self._observers:
            if _guard(observer.on_start, record):
                extra = _guard_value(observer.rank_env)
                env.update(extra if isinstance(extra, dict) else {})
        return env

    def on_rank_launch(self, rank: int, launch: LaunchEvent) -> None:
        self._each("on_rank_launch", rank, launch)

    def on_rank_start(self, rank: int) -> None:
        self._each("on_rank_start", rank)

    def on_progress(self, rank: int, progress: ProgressEvent) -> None:
        self._each("on_progress", rank, progress)

    def on_anatomy(self, rank: int, anatomy: AnatomyEvent) -> None:
        self._each("on_anatomy", rank, anatomy)

    def on_rank_output(self, rank: int, stream: str, lines: list[str]) -> None:
        self._each("on_rank_output", rank, stream, lines)

    def on_rank_log(self, rank: int, text: str) -> None:
        self._each("on_rank_log", rank, text)

    def on_file(self, rank: int, name: str, path: str) -> None:
        self._each("on_file", rank, name, path)

    def on_rank_exit(self, rank: int, error: RankFailedError | None) -> None:
        self._each("on_rank_exit", rank, error)

    def _each(self, hook: str, *args: Any) -> None:
        for observer in self._observers:
            _guard(getattr(observer, hook), *args)

    def end(self, record: RunRecord, error: BaseException | None) -> None:
        record.duration_s = time.monotonic() - self._started
        record.error = error
        for observer in self._observers:
            _guard(observer.on_end, record)


def _guard(hook: Any, *args: Any) -> bool:
    return _guard_value(hook, *args) is not _FAILED


_FAILED = object()


def _guard_value(hook: Any, *args: Any) -> Any:
    try:
        return hook(*args)
    except Exception as exc:
        owner = type(getattr(hook, "__self__", hook)).__name__
        log.warning("%s.%s failed and was skipped: %s: %s", owner, hook.__name__, type(exc).__name__, exc)
        return _FAILED
