"""Every notebook in notebooks/ runs top to bottom without an error (one kernel at a time)."""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.observe.browser import (
    DESKTOP,
    PHONE,
    artifacts_folder,
    chart_marks,
    chromium,
    have_chromium,
    open_page,
    overflow,
    screenshot,
)
from tests.scenarios.notebooks.execute import execute

NOTEBOOKS = Path(__file__).resolve().parents[3] / "notebooks"


def _needs(module: str) -> pytest.MarkDecorator:
    missing = importlib.util.find_spec(module) is None
    return pytest.mark.skipif(missing, reason=f"{module} is not installed in this environment")


@pytest.fixture(scope="module")
def browser() -> Iterator[Callable[[], Any]]:
    """One headless Chromium for every notebook's browser check, started by the first that gets to it (a start
    is a Chromium and a chromedriver process) and closed after the module's last notebook."""
    with contextlib.ExitStack() as stack:
        started: list[Any] = []

        def get() -> Any:
            if not started:
                started.append(stack.enter_context(chromium()))
            return started[0]

        yield get


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "01_pytorch_quickstart",
        pytest.param("02_horovod", marks=_needs("horovod")),
        "03_tensorflow_mwms",
        pytest.param("04_end_to_end", marks=pytest.mark.spark),
        pytest.param("05_frameworks", marks=[_needs("pytorch_lightning"), _needs("transformers")]),
    ],
)
def test_notebook_runs_top_to_bottom(name: str, browser: Callable[[], Any], tmp_path: Path) -> None:
    executed = execute(NOTEBOOKS / f"{name}.ipynb", tmp_path)
    errors = [
        o for cell in executed.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors
    assert all(cell.get("execution_count") for cell in executed.cells if cell.cell_type == "code")
    if name != "03_tensorflow_mwms":  # TorchProgress counts steps: the live view drew the ranks' anatomy
        html = [
            "".join(o.get("data", {}).get("text/html", ""))
            for c in executed.cells
            for o in c.get("outputs", [])
        ]
        views = [h for h in html if "sparkrunner: steps/s per rank" in h]
        assert views, "no live view was drawn"
        # a throughput line per rank and the anatomy's bars, not the empty view's "no steps were counted"
        assert any("<polyline" in view and "<rect" in view for view in views), views[-1][:300]
        live_view_in_browser(executed, name, browser, tmp_path)


def live_view_in_browser(executed: Any, name: str, browser: Callable[[], Any], tmp_path: Path) -> None:
    """The executed notebook exported to HTML (nbconvert), as headless Chromium shows it at 1,200 px and at a
    phone's 390: every live view's two charts have marks painted where they are, the page fits (code scrolls in
    its own boxes); a screenshot of each is kept."""
    why = have_chromium()
    if why is not None:
        pytest.skip(f"the notebook ran; its live view's browser check did not: {why}")
    from nbconvert import HTMLExporter

    page = tmp_path / f"{name}.html"
    page.write_text(HTMLExporter().from_notebook_node(executed)[0], encoding="utf-8")
    chrome = browser()
    for width in (DESKTOP, PHONE):
        open_page(chrome, page, width)
        charts = chart_marks(chrome, "svg.sr-chart")
        scroll, window = overflow(chrome)
        assert charts and len(charts) % 2 == 0, charts  # each live view: throughput, then the anatomy bars
        for throughput, anatomy in zip(charts[::2], charts[1::2], strict=True):
            assert throughput["circle"] >= 2, throughput
            assert throughput["onTop"]["circle"] == throughput["circle"], throughput
            assert anatomy["rect"] >= 2 and anatomy["onTop"]["rect"] == anatomy["rect"], anatomy
            assert throughput["width"] <= window and anatomy["width"] <= window
        assert scroll <= window, f"the exported notebook is {scroll} px wide in a {window} px window"
        screenshot(chrome, artifacts_folder(tmp_path) / f"notebook-{name}-{width}.png")
