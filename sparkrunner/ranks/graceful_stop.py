"""Graceful stop on the rank: SIGTERM (or the driver's stop message) gives `main` a grace period to save.

On cancel, timeout, Ctrl-C or a peer's failure the driver sends the ranks a stop; the rank turns it into a
SIGTERM to itself, so `main` sees the same thing whoever stops it (Spark, a scheduler, a person). The first
SIGTERM sets `stopping()`, runs the `on_stop` callbacks in the main thread, and arms a timer that kills the
rank after ``stop_grace_s``. Executor decommissioning (SIGPWR, when it reaches the rank) takes the same path.
A rank whose `main` never called `stopping()` or `on_stop()` cannot use a grace period: it dies at once, as
before, so a failure is reported without waiting.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType

from sparkrunner.channel.environment import Env
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
    _wants_grace.set()
    return _stopping.is_set()


def stop_reason() -> str | None:
    """Why this rank is stopping: ``"rescale"`` (save, the run restarts at a new size), ``"stop"``, or None."""
    return _reason if _stopping.is_set() else None


def on_stop(callback: Callable[[], None]) -> None:
    """Call `callback()` (in the main thread) when this rank is asked to stop, e.g. to save a checkpoint."""
    _wants_grace.set()
    _callbacks.append(callback)


def grace_seconds() -> float:
    """This run's ``stop_grace_s``: how long a stopping rank may take before it is killed."""
    return float(os.environ.get(Env.STOP_GRACE_S) or STOP_GRACE_S)


def install(die: Callable[[int], None]) -> None:
    """Called by the rank bootstrap: route SIGTERM (and SIGPWR) into the graceful stop, then `die(143)`.

    The signal also wakes a watcher thread (through the wakeup fd), so the grace timer is armed even while the
    main thread is blocked in C code (a collective waiting on a dead peer) and cannot run Python handlers.
    """
    global _die
    _die = die
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


def request_stop(reason: str = "stop") -> None:
    """Ask this rank to stop gracefully, from any thread (callbacks then run in the main thread); `reason` is
    what `stop_reason()` says (``"rescale"`` when an elastic run changes its size)."""
    global _reason
    if not _stopping.is_set():
        _reason = reason
    _begin_stop()
    os.kill(os.getpid(), signal.SIGTERM)


_die: Callable[[int], None] | None = None
_begin_lock = threading.Lock()


def _begin_stop() -> bool:
    """Set `stopping()` and arm the kill timer, once; True for the first caller."""
    with _begin_lock:
        if _stopping.is_set():
            return False
        _stopping.set()
    if _die is not None and not _wants_grace.is_set():
        _die(128 + signal.SIGTERM)  # nothing in `main` listens for a stop: end now, as without a grace period
    if _die is not None:
        timer = threading.Timer(grace_seconds(), _die, args=(128 + signal.SIGTERM,))
        timer.daemon = True
        timer.start()
    return True


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
