"""A read-only view of the run in flight: which ranks have connected, and their pids, hosts and barrier tasks.

`Runner.in_flight` returns a snapshot; `Runner.wait_in_flight` waits (bounded) for the ranks to connect. Tools
and tests use them instead of the runner's internals, e.g. to signal a rank's process or to ask for its stacks
once it is up. A snapshot never changes; take a new one to see later connections.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sparkrunner.driver.attempt.attempt_channel import AttemptChannel


@dataclass(frozen=True)
class ConnectedRank:
    """One rank that said hello to the driver: its process id on `host`, and the barrier task that started it
    (None for ranks on the driver, ``np < 0``)."""

    rank: int
    pid: int
    host: str
    task: int | None


@dataclass(frozen=True)
class InFlight:
    """The ranks of the current attempt that have connected so far, in rank order."""

    num_ranks: int
    ranks: tuple[ConnectedRank, ...]

    @property
    def all_connected(self) -> bool:
        return len(self.ranks) == self.num_ranks


def snapshot(channel: AttemptChannel) -> InFlight:
    """The channel's connected ranks, now."""
    with channel.changed:
        states = sorted(channel.report.ranks.items())
    ranks = tuple(ConnectedRank(r, s.pid, s.host, s.task) for r, s in states if s.connected_at is not None)
    return InFlight(channel.report.num_ranks, ranks)


class InFlightWatch:
    """The channel of the attempt in flight, published so that other threads can see and wait for the run."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.channel: AttemptChannel | None = None

    def publish(self, channel: AttemptChannel | None) -> None:
        """Make `channel` the one in flight (None: the attempt ended); wakes every waiter."""
        previous, self.channel = self.channel, channel
        with self._changed:
            self._changed.notify_all()
        if previous is not None:  # a waiter on the ended attempt's ranks moves on to the next attempt
            with previous.changed:
                previous.changed.notify_all()

    def view(self) -> InFlight | None:
        channel = self.channel
        return None if channel is None else snapshot(channel)

    def wait(self, ranks: int | None, timeout: float) -> InFlight:
        """Wait until an attempt has `ranks` (default: all) ranks connected; TimeoutError after `timeout` s."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            with self._changed:
                self._changed.wait_for(lambda: self.channel is not None, left)
            channel = self.channel
            if channel is None:
                continue
            wanted = channel.report.num_ranks if ranks is None else ranks
            if self._connected_in(channel, wanted, deadline - time.monotonic()):
                return snapshot(channel)
        raise TimeoutError(f"no run of this Runner had its ranks connected within {timeout} s")

    def _connected_in(self, channel: AttemptChannel, wanted: int, timeout: float) -> bool:
        """Whether `wanted` ranks of `channel` connect within `timeout` s, before another attempt replaces it."""
        with channel.changed:
            channel.changed.wait_for(
                lambda: self.channel is not channel or _connected(channel) >= wanted, max(timeout, 0)
            )
            return self.channel is channel and _connected(channel) >= wanted


def _connected(channel: AttemptChannel) -> int:
    return sum(1 for s in channel.report.ranks.values() if s.connected_at is not None)
