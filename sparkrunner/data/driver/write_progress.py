"""What materialize tells the person waiting: files, rows and bytes written so far, then the result's size."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sparkrunner.data.dataset import DataFile, human_bytes
from sparkrunner.placement.spark_sessions import is_connect_session
from sparkrunner.timeouts import DATA_PROGRESS_EVERY_S

log = logging.getLogger(__name__)


class _Totals:
    """Spark accumulator type for (partitions, files, rows, bytes) added up from finished tasks."""

    def zero(self, value: tuple[int, ...]) -> tuple[int, ...]:
        return (0, 0, 0, 0)

    def addInPlace(self, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(x + y for x, y in zip(a, b, strict=True))


class WriteProgress:
    """A line every few seconds while the write runs (as tasks finish), and a last line with the totals.

    Spark Connect has no accumulators: there, only the last line (from the files the tasks reported)."""

    def __init__(self, spark: Any, target: str, enabled: bool = True) -> None:
        self.accumulator = (
            None if is_connect_session(spark) else spark.sparkContext.accumulator((0,) * 4, _Totals())
        )
        self.target, self.enabled = target, enabled
        self.files: list[DataFile] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._report, name="sparkrunner-materialize", daemon=True)
        self._started = 0.0

    def __enter__(self) -> WriteProgress:
        self._started = time.monotonic()
        if self.enabled and self.accumulator is not None:
            self._thread.start()
        return self

    def __exit__(self, *failure: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.enabled and failure[0] is None:
            rows, size = sum(f.num_rows for f in self.files), sum(f.size for f in self.files)
            elapsed = time.monotonic() - self._started
            log.info(
                f"materialized {rows:,} rows into {len(self.files)} Parquet files, {human_bytes(size)}, "
                f"at {self.target} in {elapsed:.1f} s"
            )

    def _report(self) -> None:
        while not self._done.wait(DATA_PROGRESS_EVERY_S) and self.accumulator is not None:
            done, files, rows, size = self.accumulator.value
            log.info(
                f"materializing to {self.target}: {done} partitions done, {files} files, "
                f"{rows:,} rows, {human_bytes(size)} written"
            )
