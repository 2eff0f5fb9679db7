"""What a `RunObserver` is told while ranks run: public, documented event types.

They mirror what ranks send over the channel, but they are not the wire messages: the protocol may change
without changing what observers receive.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypeVar

E = TypeVar("E")


def _copy(cls: type[E], message: Any) -> E:
    """An event of type `cls` from a channel message with (at least) the same fields."""
    return cls(**{f.name: getattr(message, f.name) for f in fields(cls)})  # type: ignore[arg-type]


@dataclass(frozen=True)
class ProgressEvent:
    """A rank finished a training step (`sparkrunner.report_progress`, or a framework callback on its behalf).

    Attributes:
        step: the rank's step number (1 for the first step).
        epoch: the epoch, when the rank said it.
        total: the steps the rank expects in all, when known (for a progress bar).
        samples: the samples in this step, when known (for throughput).
        t: when the step ended, on the rank's own monotonic clock (seconds; compare within one rank only).
        metrics: numbers the rank reported with the step (loss, accuracy...).
    """

    step: int
    epoch: int | None
    total: int | None
    samples: int | None
    t: float
    metrics: dict[str, float]

    @classmethod
    def of(cls, message: Any) -> ProgressEvent:
        return _copy(cls, message)


@dataclass(frozen=True)
class AnatomyEvent:
    """Where one rank's steps went over a window of steps (`final`: over the whole run).

    Attributes:
        window: the window's number (0 for the first).
        steps: the steps in it.
        median, p95: seconds per step for each part: "step" (all of it), "data" (waiting for the next batch),
            "comm" (in collectives), "compute" and "own" (the rest).
        host: where the rank runs; task, executor: its barrier task and Spark executor (None on the driver).
        final: whether this sums up the whole run.
        span_s: seconds from the start of the window's first step to when the rank sent it (places the
            window on the driver's clock).
    """

    window: int
    steps: int
    median: dict[str, float]
    p95: dict[str, float]
    host: str
    task: int | None
    executor: str | None
    final: bool
    span_s: float

    @classmethod
    def of(cls, message: Any) -> AnatomyEvent:
        return _copy(cls, message)


@dataclass(frozen=True)
class LaunchEvent:
    """When a rank's start passed each point, in seconds of its host's monotonic clock (`time.monotonic()`, one
    clock for every process of a Linux host: compare them with each other, or with the driver's own clock only
    where the driver runs on the same host, as np < 0 and a local-cluster master do).

    Attributes:
        task_entered: its barrier task's function began (None on the driver, np < 0).
        addresses_exchanged: the task learnt every rank's address over the driver channel (None on the driver).
        spawned: its launcher asked for its process (None under mpirun, which starts it).
        interpreter_up: the process began importing sparkrunner.
        imports_done: the rank's imports were done.
        connected: its output relay and channel connection were open; it was about to say hello.
    """

    task_entered: float | None
    addresses_exchanged: float | None
    spawned: float | None
    interpreter_up: float
    imports_done: float
    connected: float

    @classmethod
    def of(cls, message: Any) -> LaunchEvent:
        return _copy(cls, message)
