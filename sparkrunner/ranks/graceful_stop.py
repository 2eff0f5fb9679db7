"""Graceful stop on the rank: SIGTERM (or the driver's stop message) gives `main` a grace period to save.

On cancel, timeout, Ctrl-C or a peer's failure the driver sends the ranks a stop; the rank turns it into a
SIGTERM to itself, so `main` sees the same thing whoever stops it (Spark, a scheduler, a person). The first
SIGTERM sets `stopping()`, runs the `on_stop` callbacks in the main thread, and arms a timer that kills the
rank after ``stop_grace_s``. Executor decommissioning (SIGPWR, when it reaches the rank) takes the same path.
A rank whose `main` never called `stopping()` or `on_stop()` cannot use a grace period: it dies at once, as
before, so a failure is reported without waiting; it first lets its background checkpoint save (if one is in
flight) finish within the grace period. Under mpirun, where one rank's exit makes Open MPI end every rank at
once, such a rank does not end on a stop from the driver while a peer saves (the driver's `Stop` says so): it
waits, and ends when the savers are done (the driver then aborts it) or with its own grace timer.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType

from sparkrunner.common.environment import Env
from sparkrunner.timeouts import STOP_GRACE_S

log = logging.getLogger(__name__)

_STOP_SIGNALS = tuple(s for s in (signal.SIGTERM, getattr(signal, "SIGPWR", None)) if s is not None)

_stopping = threading.Event()
_wants_grace = threading.Event()
_callbacks: list[Callable[[], None]] = []
_reason = "stop"


def stopping() -> bool:
    """True once this rank was asked to stop: save a checkpoint now and return (or raise) from `main`.

    Calling it tells sparkrunner that `main` handles stops: from then on a stop gives it ``stop_grace_s``.
    """
    if not _wants_grace.is_set():
        _want_grace()
    return _stopping.is_set()


def stop_reason() -> str | None:
    """Why this rank is stopping: ``"rescale"`` (save, the run restarts at a new size), ``"stop"``, or None."""
    return _reason if _stopping.is_set() else None


def on_stop(callback: Callable[[], None]) -> None:
    """Call `callback()` (in the main thread) when this rank is asked to stop, e.g. to save a checkpoint."""
    _want_grace()
    _callbacks.append(callback)


def _want_grace() -> None:
    """Note that `main` handles stops, and tell the driver, whose stops then wait for this rank's save."""
    if _wants_grace.is_set():
        return
    _wants_grace.set()
    if _tell_driver is not None:
        _tell_driver()


def grace_seconds() -> float:
    """This run's ``stop_grace_s``: how long a stopping rank may take before it is killed."""
    return float(os.environ.get(Env.STOP_GRACE_S) or STOP_GRACE_S)


def install(
    die: Callable[[int], None], tell_driver: Callable[[], object], finish_saves: Callable[[float], None]
) -> None:
    """Called by the rank bootstrap: route SIGTERM (and SIGPWR) into the graceful stop, then `die(143)`.
    `tell_driver()` says that `main` wants a grace period; `finish_saves(seconds)` waits for this rank's
    background checkpoint save before a rank that wants none ends.

    The signal also wakes a watcher thread (through the wakeup fd), so the grace timer is armed even while the
    main thread is blocked in C code (a collective waiting on a dead peer) and cannot run Python handlers.
    """
    global _die, _tell_driver, _finish_saves
    _die, _tell_driver, _finish_saves = die, tell_driver, finish_saves
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    threading.Thread(
        target=_watch_signals, args=(reader, writer), name="sparkrunner-stop", daemon=True
    ).start()
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _handle)


def reset() -> bool:
    """Between two runs of a warm rank: forget the last run's `on_stop` callbacks and grace request; True when
    that run was asked to stop (the rank then ends: its kill timer is armed)."""
    _callbacks.clear()
    _wants_grace.clear()
    _callbacks_ran.clear()
    return _stopping.is_set()


def request_stop(reason: str = "stop", peers_save: bool = False) -> None:
    """Ask this rank to stop gracefully, from any thread (callbacks then run in the main thread); `reason` is
    what `stop_reason()` says (``"rescale"`` when an elastic run changes its size). The driver's stops call it;
    `peers_save`: some rank of the run saves in its grace period."""
    global _reason, _hold
    if not _stopping.is_set():
        _reason = reason
        _hold = peers_save and _exit_ends_peers()
    _begin_stop()
    os.kill(os.getpid(), signal.SIGTERM)


def _exit_ends_peers() -> bool:
    """True under mpirun: Open MPI ends every rank at once when one exits non-zero."""
    return "OMPI_COMM_WORLD_SIZE" in os.environ


_die: Callable[[int], None] | None = None
_tell_driver: Callable[[], object] | None = None
_finish_saves: Callable[[float], None] | None = None
_begin_lock = threading.Lock()
_hold = False
"""This stop came from the driver while peers save, under mpirun: a rank that does not save waits, not ends."""


def _begin_stop() -> bool:
    """Set `stopping()` and arm the kill timer, once; True for the first caller."""
    with _begin_lock:
        if _stopping.is_set():
            return False
        _stopping.set()
    if _die is not None and not _wants_grace.is_set() and not _hold:
        _end_without_grace(_die)
    if _die is not None:
        timer = threading.Timer(grace_seconds(), _die, args=(128 + signal.SIGTERM,))
        timer.daemon = True
        timer.start()
    return True


def _end_without_grace(die: Callable[[int], None]) -> None:
    """Nothing in `main` listens for a stop: end now, as without a grace period, once this rank's background
    checkpoint save (if any) is written, within the grace period."""
    try:
        if _finish_saves is not None:
            _finish_saves(grace_seconds())
    except Exception:
        log.exception("sparkrunner: the checkpoint being saved in the background was lost")
    die(128 + signal.SIGTERM)


def _watch_signals(reader: socket.socket, writer: socket.socket) -> None:
    with reader, writer:
        while data := reader.recv(64):
            if any(signum in _STOP_SIGNALS for signum in data):
                _begin_stop()


_callbacks_ran = threading.Event()


def _handle(signum: int, frame: FrameType | None) -> None:
    _begin_stop()
    if _callbacks_ran.is_set():
        return
    _callbacks_ran.set()
    for callback in list(_callbacks):
        try:
            callback()
        except Exception:
            log.exception("sparkrunner: an on_stop callback failed")
