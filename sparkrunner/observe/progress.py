"""Training progress, driver side: a live bar (tqdm, terminal or notebook) and every rank's step timings.

The ranks' half (`report_progress`, `TorchProgress`, the Keras callback) is `sparkrunner.ranks.progress`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sparkrunner.observe.events import ProgressEvent
from sparkrunner.observe.observers import RunObserver, RunRecord


class ProgressObserver(RunObserver):
    """Keeps every progress report with its step duration and shows a live bar (tqdm) while ranks report."""

    def __init__(self, show: bool = True) -> None:
        self._show = show
        self._lock = threading.Lock()
        self._rows: list[dict[str, Any]] = []
        self._last: dict[int, ProgressEvent] = {}
        self._bar: Any = None

    def on_start(self, record: RunRecord) -> None:
        self._rows, self._last, self._bar = [], {}, None
        self._started = time.monotonic()

    def on_progress(self, rank: int, progress: ProgressEvent) -> None:
        with self._lock:
            previous = self._last.get(rank)
            step_s = progress.t - previous.t if previous else float("nan")
            row = {
                "rank": rank,
                "step": progress.step,
                "epoch": progress.epoch,
                "samples": progress.samples,
                "step_s": step_s,
                "elapsed_s": time.monotonic() - self._started,
                **progress.metrics,
            }
            self._rows.append(row)
            self._last[rank] = progress
            if self._show:
                self._update_bar(rank, progress)

    def _update_bar(self, rank: int, progress: ProgressEvent) -> None:
        if self._bar is None:
            self._bar = _new_bar(progress.total)
            if self._bar is None:
                self._show = False
                return
        done = min(p.step for p in self._last.values())  # the bar follows the slowest rank
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)
        if rank == 0:
            postfix: dict[str, Any] = {"epoch": progress.epoch} if progress.epoch is not None else {}
            postfix.update({k: f"{v:.4g}" for k, v in progress.metrics.items()})
            self._bar.set_postfix(postfix, refresh=False)

    def on_end(self, record: RunRecord) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.close()
            if self._rows:
                import pandas as pd

                record.timings = pd.DataFrame(self._rows)


def _new_bar(total: int | None) -> Any:
    """tqdm's notebook widget when ipywidgets is there, its text bar otherwise; None without tqdm."""
    try:
        import ipywidgets  # noqa: F401
        from tqdm.auto import tqdm
    except ImportError:
        try:
            from tqdm import tqdm
        except ImportError:
            return None
    return tqdm(total=total, unit="step", desc="training", dynamic_ncols=True, mininterval=0.5)
