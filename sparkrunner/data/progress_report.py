"""What materialize tells the person waiting: files, rows and bytes written so far, then the result's size."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from sparkrunner.data.dataset import human_bytes

_EVERY_S = 5.0


class _Totals:
    """Spark accumulator type for (partitions, files, rows, bytes) added up from finished tasks."""

    def zero(self, value: tuple[int, ...]) -> tuple[int, ...]:
        return (0, 0, 0, 0)

    def addInPlace(self, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(x + y for x, y in zip(a, b, strict=True))


class WriteProgress:
    """A line every few seconds while the write runs (as tasks finish), and a last line with the totals."""

    def __init__(self, spark_context: Any, target: str, enabled: bool = True) -> None:
        self.accumulator = spark_context.accumulator((0, 0, 0, 0), _Totals())
        self.target, self.enabled = target, enabled
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._report, name="sparkrunner-materialize", daemon=True)
        self._started = 0.0

    def __enter__(self) -> WriteProgress:
        self._started = time.monotonic()
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *failure: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.enabled and failure[0] is None:
            _, files, rows, size = self.accumulator.value
            elapsed = time.monotonic() - self._started
            _say(
                f"materialized {rows:,} rows into {files} Parquet files, {human_bytes(size)}, "
                f"at {self.target} in {elapsed:.1f} s"
            )

    def _report(self) -> None:
        while not self._done.wait(_EVERY_S):
            done, files, rows, size = self.accumulator.value
            _say(
                f"materializing to {self.target}: {done} partitions done, {files} files, "
                f"{rows:,} rows, {human_bytes(size)} written"
            )


def _say(line: str) -> None:
    print(f"[sparkrunner] {line}", file=sys.stderr, flush=True)
