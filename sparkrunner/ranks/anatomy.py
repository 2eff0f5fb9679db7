"""Step anatomy, rank side: where each step's time goes (waiting for data, in collectives, computing).

One clock per rank process. Steps come from ONE source, never two:

- an *iterator source*: sparkrunner's loaders (`NumpyLoader`, `TorchLoader`, `tf_dataset`) or
  `sparkrunner.timed(any_iterable)`. A step runs from one request for a batch to the next, and the time
  spent inside that request is the step's data wait. The first iterable to deliver a batch owns the steps
  until it is exhausted; an iterable nested inside it (``timed(TorchLoader(...))``) or iterated beside it
  adds nothing; one iterated beside it after it is exhausted (a validation loop) becomes the owner in turn.
- `report_progress` (and so `TorchProgress` and the Keras callback): a step runs from one report to the
  next. It is a source only while no iterator source has delivered a batch, so ``TorchProgress(TorchLoader)``
  counts each step once, from the loader, and still sends its progress reports for the bar.

Waits in collectives come from `sparkrunner.ranks.collective_timing` (`add_comm`); compute is the rest of the
step. Every `WINDOW_STEPS` steps (or `ANATOMY_WINDOW_S`, whichever comes first) the rank sends one
`StepAnatomy` message of medians and 95th percentiles, and at the end of `main` one more over the whole run.
A window's medians leave out its steps that saved a checkpoint through sparkrunner (`checkpoint_step`), so
that a periodic save on one rank does not read as straggling; the whole run's summary counts them.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from sparkrunner.channel.messages import StepAnatomy
from sparkrunner.common.environment import Env
from sparkrunner.ranks.api import in_run, send_to_driver
from sparkrunner.timeouts import ANATOMY_WINDOW_S

T = TypeVar("T")

WINDOW_STEPS = 25
"""Steps summed up in one `StepAnatomy` message (fewer when `ANATOMY_WINDOW_S` passes first)."""
RUN_SAMPLE_STEPS = 4096
"""The whole run's summary is taken over a uniform sample of this many steps (memory stays bounded)."""
PARTS = ("step", "data", "comm", "compute", "own")
"""own = step - comm: the time the rank itself took (its data wait and its compute)."""

_ITERATOR, _REPORT = "iterator", "report"


class StepClock:
    """Cuts this rank's time into steps and each step into data wait, collective wait and compute."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: object | None = None  # the iterable whose batches are the steps, or _REPORT
        self._fetching = False
        self._start: float | None = None  # when the current step began
        self._data = self._comm = 0.0
        self._saves = False  # the current step saves a checkpoint
        self._window: list[tuple[float, float, float]] = []
        self._saving_steps: list[tuple[float, float, float]] = []  # the window's steps that saved
        self._window_start = 0.0
        self._first_start = 0.0  # when the run's first step began
        self._windows = 0
        self._all: list[tuple[float, float, float]] = []  # a uniform sample of the run's steps
        self._steps = 0
        self._sampler = random.Random(0)

    def fetch(self, source: object, batches: Iterator[T]) -> T:
        """The next batch of `source` (raises StopIteration at its end), timed as data wait."""
        if self._fetching:  # nested in another timed fetch: the outer one measures it
            return next(batches)
        self._fetching = True
        asked = time.monotonic()
        try:
            if self._owner is None or self._owner is _REPORT:
                self._claim(source, asked)
            owns = self._owner is source
            if owns:
                self._boundary(asked)
            try:
                batch = next(batches)
            except StopIteration:
                self.release(source)  # the time between epochs is no step
                raise
            self._data += time.monotonic() - asked
            return batch
        finally:
            self._fetching = False

    def release(self, source: object) -> None:
        """`source` will deliver no more batches: the next iterable may own the steps."""
        if self._owner is source:
            self._owner, self._start = None, None

    def report(self) -> None:
        """`report_progress` was called: a step boundary unless an iterator source owns the steps."""
        now = time.monotonic()
        if self._owner is None:
            self._claim(_REPORT, now)
        if self._owner is _REPORT:
            self._boundary(now)

    def add_comm(self, seconds: float) -> None:
        """Time this rank spent waiting in a collective (any thread)."""
        with self._lock:
            self._comm += seconds

    def mark_save(self) -> None:
        """The current step saves a checkpoint: the straggler detector leaves it out (a periodic save on
        rank 0 is not straggling); the run's summary keeps it."""
        self._saves = True

    def _claim(self, owner: object, now: float) -> None:
        if self._owner is not owner:
            self._owner, self._start, self._data = owner, None, 0.0
            with self._lock:
                self._comm = 0.0
        if not self._window_start:
            self._window_start = now
        if not self._first_start:
            self._first_start = now

    def _boundary(self, now: float) -> None:
        """End the current step at `now` and start the next one."""
        with self._lock:
            comm, self._comm = self._comm, 0.0
        if self._start is not None:
            step = now - self._start
            row = (step, min(self._data, step), min(comm, step))
            (self._saving_steps if self._saves else self._window).append(row)
            self._sample(row)
        self._start, self._data, self._saves = now, 0.0, False
        steps = len(self._window) + len(self._saving_steps)  # every rank's window k covers the same steps
        if steps >= WINDOW_STEPS or (steps and now - self._window_start >= ANATOMY_WINDOW_S):
            self._send_window()
            self._window_start = now

    def _send_window(self) -> None:
        """Send the window's summary over its steps that saved no checkpoint (over all, if every one did)."""
        self._send(self._window or self._saving_steps, False, self._window_start)
        self._window, self._saving_steps = [], []

    def _sample(self, row: tuple[float, float, float]) -> None:
        """Keep `row` in the run's sample with probability sample size / steps so far (reservoir sampling)."""
        self._steps += 1
        if len(self._all) < RUN_SAMPLE_STEPS:
            self._all.append(row)
        elif (slot := self._sampler.randrange(self._steps)) < RUN_SAMPLE_STEPS:
            self._all[slot] = row

    def finish(self) -> None:
        """`main` returned (or raised): send the summary of the whole run."""
        if self._window or self._saving_steps:
            self._send_window()
        if self._all:
            self._send(self._all, True, self._first_start)
        self._all = []

    def _send(self, rows: list[tuple[float, float, float]], final: bool, since: float) -> None:
        """Send the summary of `rows`, whose first step began at `since`."""
        median, p95 = summarize(rows)
        task, executor = os.environ.get(Env.STARTED_BY_TASK), os.environ.get(Env.EXECUTOR)
        where = (socket.gethostname(), int(task) if task else None, executor)
        message = StepAnatomy(self._windows, len(rows), median, p95, *where, final, time.monotonic() - since)
        self._windows += 1
        send_to_driver(message)


def summarize(rows: list[tuple[float, float, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """Per part, the median and the 95th percentile of `rows` of (step, data, comm) seconds."""
    columns = {
        "step": [r[0] for r in rows],
        "data": [r[1] for r in rows],
        "comm": [r[2] for r in rows],
        "compute": [max(r[0] - r[1] - r[2], 0.0) for r in rows],
        "own": [r[0] - r[2] for r in rows],
    }
    median = {part: _quantile(values, 0.5) for part, values in columns.items()}
    return median, {part: _quantile(values, 0.95) for part, values in columns.items()}


def _quantile(values: list[float], q: float) -> float:
    """The `q` quantile by linear interpolation (as numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


_clock: StepClock | None = None
_collectives_timed = False


def start() -> None:
    """In the rank bootstrap, before each run's `main`: a fresh clock; collectives are patched once per process
    (a warm session's rank runs many `main`s) and report to whichever clock is current."""
    global _clock, _collectives_timed
    _clock = None
    if in_run() and os.environ.get(Env.ANATOMY) != "0":
        _clock = StepClock()
        if not _collectives_timed:
            from sparkrunner.ranks import collective_timing

            collective_timing.install(_add_comm)
            _collectives_timed = True


def _add_comm(seconds: float) -> None:
    current = _clock
    if current is not None:
        current.add_comm(seconds)


def clock() -> StepClock | None:
    """This rank's clock, or None outside a run or with ``SPARKRUNNER_ANATOMY=0``."""
    return _clock


def checkpoint_step() -> None:
    """The current step saves a checkpoint (`save_checkpoint` and `sharded_checkpoint` call it)."""
    if _clock is not None:
        _clock.mark_save()


def finish() -> None:
    """Send the whole run's summary (the rank bootstrap calls it when `main` is done)."""
    if _clock is not None:
        _clock.finish()


def timed(iterable: Iterable[T]) -> Iterator[T]:
    """Yield `iterable`'s items; inside a run, each step's data wait is timed and its steps are counted.

    Wrap any loader sparkrunner does not provide: ``for x, y in sparkrunner.timed(dataloader): ...``.
    """
    batches = iter(iterable)
    owner = clock()
    if owner is None:
        yield from batches
        return
    key = object()
    try:
        while True:
            try:
                batch = owner.fetch(key, batches)
            except StopIteration:
                return
            yield batch
    finally:
        owner.release(key)  # a loop left early (break) gives up the steps too
        close = getattr(batches, "close", None)
        if close is not None:
            close()
