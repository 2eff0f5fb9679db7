"""The driver's half of rank output: show each rank's lines and latest progress update, keep a bounded tail.

Whatever `driver_log_verbosity` is, each rank's last `TAIL_LINES` lines are kept for error messages.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
import time
from collections import deque
from typing import TextIO

from sparkrunner.timeouts import LOGGED_UPDATE_INTERVAL_S

TAIL_LINES = 1000
"""Lines the driver keeps per rank (for errors, stack dumps and the MLflow artifact)."""


class RankOutput:
    """Driver side: shows the ranks' lines and progress updates and keeps each rank's last `TAIL_LINES` lines."""

    def __init__(self, show: bool) -> None:
        self._show = show
        self._tails: dict[int, deque[str]] = {}
        self._lock = threading.Lock()
        self._open_update = 0  # characters of the update line now on screen (live displays)
        self._logged_update_at: dict[int, float] = {}

    def lines(self, rank: int, stream: str, lines: list[str]) -> None:
        with self._lock:
            self._tails.setdefault(rank, deque(maxlen=TAIL_LINES)).extend(lines)
            if not self._show:
                return
            out = _sink(stream)
            self._clear_update(out)
            out.write("".join(f"[rank {rank}] {line}\n" for line in lines))
            out.flush()

    def logged(self, rank: int, text: str) -> None:
        """Show what a rank sent with `log_to_driver`, whatever `driver_log_verbosity` is."""
        with self._lock:
            self._clear_update(sys.stdout)
            sys.stdout.write(f"[rank {rank}] {text}\n")
            sys.stdout.flush()

    def update(self, rank: int, stream: str, text: str) -> None:
        """Show a rank's latest progress update: in place on a terminal or notebook, now and then in a log."""
        if not self._show:
            return
        with self._lock:
            out = _sink(stream)
            shown = f"[rank {rank}] {text}"
            if _is_live(out):
                out.write("\r" + shown.ljust(self._open_update))
                self._open_update = len(shown)
            elif time.monotonic() - self._logged_update_at.get(rank, -1e9) >= LOGGED_UPDATE_INTERVAL_S:
                self._logged_update_at[rank] = time.monotonic()
                out.write(shown + "\n")
            out.flush()

    def _clear_update(self, out: TextIO) -> None:
        if self._open_update:
            out.write("\r" + " " * self._open_update + "\r")
            self._open_update = 0

    def tail(self, rank: int, lines: int | None = None) -> list[str]:
        """The last `lines` lines `rank` printed (all that are kept when None)."""
        with self._lock:
            kept = list(self._tails.get(rank, ()))
        return kept if lines is None else kept[-lines:]


def _sink(stream: str) -> TextIO:
    return sys.stderr if stream == "stderr" else sys.stdout


def _is_live(out: TextIO) -> bool:
    """A terminal or a Jupyter output area: both redraw a line on `\\r`."""
    if type(out).__module__.startswith("ipykernel"):
        return True
    with contextlib.suppress(ValueError, io.UnsupportedOperation):
        return out.isatty()
    return False
