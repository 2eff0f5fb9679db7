"""The live view in a notebook: one output area, redrawn in place, with per-rank throughput and anatomy bars.

It uses IPython's display (an HTML block updated through its display handle), so it needs no widget
library; outside an IPython kernel (a terminal) it stays off and the driver logs a text table instead.
"""

from __future__ import annotations

import time
from typing import Any

from sparkrunner.observe.report import Window, anatomy_svg, throughput_svg
from sparkrunner.timeouts import LIVE_VIEW_REFRESH_S


class NotebookView:
    """Draws the run's per-rank throughput and step anatomy into one notebook output, updated in place."""

    def __init__(self) -> None:
        self._handle: Any = None
        self._drawn = 0.0

    @staticmethod
    def available() -> bool:
        """True in a Jupyter (IPython kernel) session."""
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
        return shell is not None and getattr(shell, "kernel", None) is not None

    def refresh(self, history: list[Window], force: bool = False) -> None:
        """Redraw from `history` unless it was redrawn less than `LIVE_VIEW_REFRESH_S` ago."""
        now = time.monotonic()
        if not force and now - self._drawn < LIVE_VIEW_REFRESH_S:
            return
        self._drawn = now
        from IPython.display import HTML, display

        latest = {rank: dict(window.median) for rank, _, window in history}
        body = HTML(
            "<div><b>sparkrunner: steps/s per rank</b>" + throughput_svg(history)
            + "<b>step anatomy, latest window (median ms)</b>" + anatomy_svg(latest) + "</div>"
        )  # fmt: skip
        if self._handle is None:
            self._handle = display(body, display_id=True)
        else:
            self._handle.update(body)
