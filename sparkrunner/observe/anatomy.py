"""Step anatomy, driver side: every rank's windows, straggler warnings, a live per-rank table, the run's table.

The ranks' half (what a step is, how its parts are timed) is `sparkrunner.ranks.anatomy`. The run's table
(`RunRecord.step_anatomy`) comes from each rank's final summary, over all of its steps.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

from sparkrunner.errors import StragglerWarning
from sparkrunner.observe.charts import PARTS, Timeline
from sparkrunner.observe.events import AnatomyEvent
from sparkrunner.observe.live_view import NotebookView
from sparkrunner.observe.observers import RunObserver, RunRecord
from sparkrunner.observe.report import save_report
from sparkrunner.observe.stragglers import StragglerDetector
from sparkrunner.timeouts import ANATOMY_TABLE_EVERY_S

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


class AnatomyObserver(RunObserver):
    """Follows the ranks' step anatomy: warns about stragglers, shows a live table, fills the run's record."""

    def __init__(self, show: bool = True) -> None:
        self._show = show
        self._lock = threading.Lock()
        self.history: list[tuple[int, float, AnatomyEvent]] = []
        """(rank, seconds since the start, window) of every window so far: the live views and the report."""
        self._finals: dict[int, AnatomyEvent] = {}
        self._started_at: dict[int, float] = {}  # rank -> seconds since the start when its process connected
        self.stragglers: list[str] = []
        """The straggler warnings of the run so far."""
        self._detector = StragglerDetector(0)
        self._started = self._shown = 0.0
        self._view: NotebookView | None = None

    def on_start(self, record: RunRecord) -> None:
        with self._lock:
            self.history, self._finals, self.stragglers, self._started_at = [], {}, [], {}
            self._detector = StragglerDetector(abs(record.np))
            self._started = self._shown = time.monotonic()
            self._view = NotebookView(self.timeline) if self._show and NotebookView.available() else None

    def on_rank_start(self, rank: int) -> None:
        with self._lock:
            self._started_at.setdefault(rank, time.monotonic() - self._started)

    def on_anatomy(self, rank: int, anatomy: AnatomyEvent) -> None:
        with self._lock:
            if anatomy.final:
                self._finals[rank] = anatomy
                return
            now = time.monotonic()
            self.history.append((rank, now - self._started, anatomy))
            stragglers = [s.message() for s in self._detector.add(rank, anatomy)]
            self.stragglers += stragglers
            show = self._show and now - self._shown >= ANATOMY_TABLE_EVERY_S
            if show:
                self._shown = now
        for straggler in stragglers:
            warnings.warn(straggler, StragglerWarning, stacklevel=1)
        if show and self._view is None:
            log.info("step anatomy, median ms per step:\n%s", live_table(self.latest()))

    def timeline(self) -> Timeline:
        """The run so far on the driver's clock: every window and when each rank connected."""
        with self._lock:
            return Timeline(list(self.history), dict(self._started_at))

    def latest(self) -> dict[int, AnatomyEvent]:
        """Each rank's latest window."""
        with self._lock:
            return {rank: window for rank, _, window in self.history}

    def on_end(self, record: RunRecord) -> None:
        with self._lock:
            finals = dict(self._finals)
        if finals:
            record.step_anatomy = anatomy_table(finals)
        if self._view is not None:
            self._view.close()
        if finals or self.history:
            record.report_path = save_report(record, self.timeline(), self.stragglers)
            log.info("run report (throughput and step anatomy per rank): %s", record.report_path)


def anatomy_table(summaries: dict[int, AnatomyEvent]) -> pd.DataFrame:
    """Per rank (the index): host, Spark executor (None on the driver), steps, then the median and p95 seconds
    of every part."""
    import pandas as pd

    rows = {}
    for rank, summary in sorted(summaries.items()):
        row: dict[str, Any] = {"host": summary.host, "executor": summary.executor, "steps": summary.steps}
        for part in PARTS:
            row[f"{part}_median_s"] = summary.median[part]
            row[f"{part}_p95_s"] = summary.p95[part]
        rows[rank] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "rank"
    return table


def live_table(latest: dict[int, AnatomyEvent]) -> str:
    """A compact text table of each rank's latest window: steps/s and the median ms of every part."""
    lines = [f"{'rank':>4} {'steps/s':>8} " + " ".join(f"{part:>8}" for part in PARTS)]
    for rank, window in sorted(latest.items()):
        step = window.median["step"]
        rate = f"{1 / step:8.1f}" if step > 0 else f"{'-':>8}"
        parts = " ".join(f"{window.median[part] * 1000:8.1f}" for part in PARTS)
        lines.append(f"{rank:>4} {rate} {parts}")
    return "\n".join(lines)
