"""The live view in a notebook: one output area, redrawn in place, with per-rank throughput and anatomy bars.

It uses IPython's display (an HTML block updated through its display handle), so it needs no widget
library; outside an IPython kernel (a terminal) it stays off and the driver logs a text table instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sparkrunner.observe.charts import STYLE, Timeline, anatomy_svg, throughput_svg
from sparkrunner.timeouts import LIVE_VIEW_REFRESH_S


class NotebookView:
    """Draws the run's per-rank throughput and step anatomy into one notebook output, redrawn in place every
    `LIVE_VIEW_REFRESH_S` from its own thread while the run goes, whether or not a window arrived."""

    def __init__(self, timeline: Callable[[], Timeline]) -> None:
        self._timeline = timeline
        self._handle: Any = None
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="sparkrunner-live-view", daemon=True)
        self._thread.start()

    @staticmethod
    def available() -> bool:
        """True in a Jupyter (IPython kernel) session."""
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
        return shell is not None and getattr(shell, "kernel", None) is not None

    def _tick(self) -> None:
        while not self._stop.wait(LIVE_VIEW_REFRESH_S):
            self._draw("running")

    def close(self) -> None:
        """Stop redrawing; draw the run's last state."""
        self._stop.set()
        self._thread.join()
        self._draw("done")

    def _draw(self, state: str) -> None:
        from IPython.display import HTML, display

        timeline = self._timeline()
        latest = {rank: dict(window.median) for rank, _, window in timeline.windows}
        elapsed = time.monotonic() - self._started
        body = HTML(
            f"<div>{STYLE}<b>sparkrunner: steps/s per rank</b> ({state}, {elapsed:.0f} s)" + throughput_svg(timeline)
            + "<b>step anatomy, latest window (median ms)</b>" + anatomy_svg(latest) + "</div>"
        )  # fmt: skip
        if self._handle is None:
            self._handle = display(body, display_id=True)
        else:
            self._handle.update(body)
