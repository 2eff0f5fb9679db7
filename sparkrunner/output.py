"""Rank output on its way to the driver: split into lines and progress updates, bounded, batched, shown.

Rank side: `pump` reads a captured fd in linear time, cuts over-long lines with a marker, batches finished
lines into one message per read and forwards `\\r`-terminated progress updates (tqdm) at most every
`UPDATE_INTERVAL_S`. Driver side: `RankOutput` shows lines and the latest update of each rank and keeps a
bounded tail per rank for error messages, whatever `driver_log_verbosity` is.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import re
import select
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TextIO

MAX_LINE_CHARS = 16384
"""Longer lines are cut to this many characters and end with `cut_marker`."""
UPDATE_INTERVAL_S = 0.2
"""A rank sends at most one progress update (a `\\r`-terminated line) per stream this often."""
TAIL_LINES = 1000
"""Lines the driver keeps per rank (for errors, stack dumps and the MLflow artifact)."""
ERROR_TAIL_LINES = 20
"""Lines of a rank's output an error message shows (the full tail is an attribute of the error)."""
LOGGED_UPDATE_INTERVAL_S = 10.0
"""Where output is a log (not a terminal or notebook), a rank's progress update is shown this rarely."""

_READ_BYTES = 65536
_SEPARATORS = re.compile(r"(\n|\r)")


def cut_marker(cut_chars: int) -> str:
    return f" [... {cut_chars} more characters of this line cut by sparkrunner]"


class LineSplitter:
    """Splits text into finished lines and `\\r` progress updates; its state never exceeds one bounded line."""

    def __init__(self, max_line: int = MAX_LINE_CHARS) -> None:
        self._max = max_line
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head = ""  # the unfinished line, at most max_line characters
        self._cut = 0  # characters of the unfinished line dropped beyond max_line
        self._carry = ""  # a trailing "\r" that may be the first half of "\r\n"

    def feed(self, chunk: bytes) -> tuple[list[str], str | None]:
        """Returns the lines `chunk` finished and the latest progress update after the last of them."""
        text = self._carry + self._decoder.decode(chunk)
        self._carry = ""
        if text.endswith("\r"):
            text, self._carry = text[:-1], "\r"
        if "\r" not in text:  # the common case: C-speed split
            *done, rest = text.split("\n")
            lines = [self._complete(done[0]), *map(self._bounded, done[1:])] if done else []
            self._extend(rest)
            return lines, None
        return self._feed_with_updates(text.replace("\r\n", "\n"))

    def _feed_with_updates(self, text: str) -> tuple[list[str], str | None]:
        parts = _SEPARATORS.split(text)
        lines: list[str] = []
        update: str | None = None
        for i in range(0, len(parts) - 1, 2):
            segment = self._complete(parts[i])
            if parts[i + 1] == "\n":
                lines.append(segment)
                update = None
            elif segment:
                update = segment
        self._extend(parts[-1])
        return lines, update

    def flush(self) -> str | None:
        """The unfinished line at the end of the stream, if any."""
        self._extend(self._decoder.decode(b"", final=True) + self._carry)
        self._carry = ""
        if not self._head and not self._cut:
            return None
        return self._complete("").rstrip("\r")

    def _bounded(self, line: str) -> str:
        if len(line) <= self._max:
            return line
        return line[: self._max] + cut_marker(len(line) - self._max)

    def _complete(self, text: str) -> str:
        head, cut = self._head, self._cut
        self._head, self._cut = "", 0
        if cut:
            return head + cut_marker(cut + len(text))
        return self._bounded(head + text)

    def _extend(self, rest: str) -> None:
        if self._cut:
            self._cut += len(rest)
            return
        head = self._head + rest
        if len(head) > self._max:
            self._head, self._cut = head[: self._max], len(head) - self._max
        else:
            self._head = head


SendLines = Callable[[list[str]], None]
SendUpdate = Callable[[str], None]


def pump(read_fd: int, send_lines: SendLines, send_update: SendUpdate, echo_fd: int | None = None) -> None:
    """Forward everything written to `read_fd` until EOF: lines batched per read, updates rate-limited."""
    splitter = LineSplitter()
    update: str | None = None
    sent_at = 0.0
    while True:
        if update is not None and time.monotonic() - sent_at >= UPDATE_INTERVAL_S:
            send_update(update)
            update, sent_at = None, time.monotonic()
        wait = None if update is None else max(0.0, sent_at + UPDATE_INTERVAL_S - time.monotonic())
        if not select.select([read_fd], [], [], wait)[0]:
            continue
        chunk = os.read(read_fd, _READ_BYTES)
        if not chunk:
            break
        if echo_fd is not None:
            with contextlib.suppress(OSError):
                os.write(echo_fd, chunk)
        lines, latest = splitter.feed(chunk)
        if lines:
            send_lines(lines)
            update = None
        if latest is not None:
            update = latest
    last = splitter.flush()
    if last is not None:
        send_lines([last])
    elif update is not None:
        send_update(update)


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
