"""How an attempt's ranks go, however it ended: nothing of the attempt is left behind.

After a success the ranks exit on their own and their values are read (`end_attempt`); after a failure they are
stopped, then killed, and a second Ctrl-C cuts that short (`kill_now`). Either way the placement ends, the
channel closes and what is left of the attempt's processes is swept.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.placement import Placement
from sparkrunner.system import processes
from sparkrunner.timeouts import EXIT_POLL_S, EXIT_WAIT_S, OUTPUT_END_WAIT_S, SWEEP_GRACE_S

log = logging.getLogger(__name__)


def end_attempt(
    channel: AttemptChannel,
    placement: Placement,
    attempt_id: str,
    error: BaseException | None,
    values_of: range,
    stop_grace_s: float,
) -> tuple[list[Any], BaseException | None]:
    """After a success (`error` None) let the ranks exit and read the values of the ranks `values_of`; otherwise
    stop them. Returns the values and the attempt's error (None: it succeeded); a second Ctrl-C cuts the
    shutdown short."""
    if error is not None:
        return [], shut_down_after_failure(channel, placement, attempt_id, stop_grace_s, error)
    try:
        _let_exit(channel, placement)
        _sweep(channel, placement, attempt_id)
        return channel.result_values(values_of), None
    except BaseException as exc:  # the ranks succeeded, but their end or their values failed
        if not isinstance(exc, Exception):
            kill_now(channel, placement, attempt_id)
        return [], exc


def kill_now(channel: AttemptChannel, placement: Placement, attempt_id: str) -> None:
    """Leave nothing behind, without waiting: on a second Ctrl-C, or an interrupt between two steps."""
    channel.abort_ranks()
    placement.stop()
    channel.close()
    processes.sweep_attempt(attempt_id, grace_s=0)


def _let_exit(channel: AttemptChannel, placement: Placement) -> None:
    """Let the ranks exit on their own first (not what they left: a daemon may hold mpirun up), their last output
    delivered."""
    deadline = time.monotonic() + EXIT_WAIT_S
    with channel.changed:  # a rank hanging up wakes it (a warm session's ranks stay up)
        while not (placement.finished() or channel.ranks_ended_here()) and time.monotonic() < deadline:
            channel.changed.wait(EXIT_POLL_S)  # (nothing wakes it when the Spark job ends)
        # what a relay sent last may still wait in the driver's socket or handler queue: closing the channel
        # now would drop a rank's last lines
        channel.wait_until(channel.output_delivered, OUTPUT_END_WAIT_S)


def _sweep(channel: AttemptChannel, placement: Placement, attempt_id: str) -> None:
    """The placement ends, the channel closes, and what is left of the attempt is killed."""
    placement.stop()
    log.debug("attempt %s: its placement ended", attempt_id)
    channel.close()
    sweep_leftovers(attempt_id, f"attempt {attempt_id}")  # the attempt as a whole has ended


def sweep_leftovers(attempt_id: str, whose: str) -> None:
    """Kill what is left of the processes that carry `attempt_id` (after `SWEEP_GRACE_S`), saying what of `whose`."""
    leftover = processes.sweep_attempt(attempt_id, grace_s=SWEEP_GRACE_S)
    if leftover:
        log.warning(
            "killed %d leftover process(es) of %s: %s", len(leftover), whose, processes.described(leftover)
        )


def shut_down_after_failure(
    channel: AttemptChannel, placement: Placement, attempt_id: str, stop_grace_s: float, error: BaseException
) -> BaseException:
    """Stop the ranks (SIGTERM, up to `stop_grace_s`), kill what is left and leave nothing behind; returns the error
    the attempt ended with. An error while doing so is logged and noted, never replaces the attempt's; an interrupt
    (a second Ctrl-C) ends the shutdown at once: what is left is killed without waiting, and the interrupt is what
    the attempt ended with."""
    try:
        channel.stop_ranks(stop_grace_s)
        log.debug("attempt %s: every rank stopped", attempt_id)
        _sweep(channel, placement, attempt_id)
    except KeyboardInterrupt as again:
        log.warning("interrupted while shutting down: killing every process of the attempt now")
        kill_now(channel, placement, attempt_id)
        if isinstance(error, Exception):  # the first Ctrl-C came during this shutdown: it stays an interrupt
            again.__context__ = error
            return again
    except BaseException as exc:
        log.warning("while shutting down after the run failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
        note = f"(while shutting down after this error, sparkrunner also hit {type(exc).__name__}: {exc})"
        if hasattr(error, "add_note"):
            error.add_note(note)
        error.__dict__.setdefault("shutdown_error", exc)
    return error
