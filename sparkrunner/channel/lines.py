"""Output lines on their way to the driver: split into finished lines and `\\r` progress updates, each line bounded.

Used wherever a process's output is read: the rank's output relay and the spawner that keeps mpirun's tail.
"""

from __future__ import annotations

import codecs
import re

MAX_LINE_CHARS = 16384
"""Longer lines are cut to this many characters and end with `cut_marker`."""

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
