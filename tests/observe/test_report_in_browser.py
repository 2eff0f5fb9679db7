"""The run's HTML report as a person sees it, in headless Chromium: reports of three real runs (2 ranks on the
driver, np < 0, launcher="direct"): a short one (3 steps), a long one (400 steps in windows of 0.2 s) and one
whose rank 1 raises. In each, every chart has marks the browser paints, the page fits a 1,200 px window and a
390 px phone (the table scrolls in its own box), the top says what ran and how it ended; a full-page screenshot
of each is kept (SPARKRUNNER_TEST_ARTIFACTS, else pytest's tmp folder)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import RankFailedError, Runner
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
    visible_text,
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(have_chromium() is not None, reason=have_chromium() or "")]

SETUP_S = 1.0  # each rank sleeps this long before its first step: the report's "setup" band
STEP_S = 0.01
LONG_STEPS, WINDOW_S = 400, 0.2  # 4 s of steps in windows of 0.2 s: about 20 windows per rank
FAIL_AT = 60


def steps(count: int, fail_at: int | None = None) -> int:
    """`count` steps of a timed loader (each STEP_S of compute) after SETUP_S of setup; rank 1 raises at step
    `fail_at`."""
    import os
    import time

    import sparkrunner

    time.sleep(SETUP_S)
    for step in sparkrunner.timed(range(count)):
        if step == fail_at and os.environ["RANK"] == "1":
            raise ValueError(f"the loss became NaN at step {step}")
        time.sleep(STEP_S)
    return count


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """name -> the finished run's record, for the short, the long and the failed run."""
    folder = tmp_path_factory.mktemp("reports")
    env = {"SPARKRUNNER_ANATOMY_WINDOW_S": str(WINDOW_S)}
    made = {}
    saved = os.environ.get("SPARKRUNNER_REPORT_DIR")
    os.environ["SPARKRUNNER_REPORT_DIR"] = str(folder)
    try:
        for name, args in {"short": (3,), "long": (LONG_STEPS,), "failed": (LONG_STEPS, FAIL_AT)}.items():
            tracked = name == "failed"  # into the suite's throwaway MLflow store (tests/conftest.py)
            runner = Runner(np=-2, launcher="direct", progress=False, tracking=tracked, env=env)
            if name == "failed":
                with pytest.raises(RankFailedError):
                    runner.run(steps, *args)
            else:
                assert runner.run(steps, *args) == args[0]
            made[name] = runner.last_run
    finally:
        if saved is None:
            os.environ.pop("SPARKRUNNER_REPORT_DIR")
        else:
            os.environ["SPARKRUNNER_REPORT_DIR"] = saved
    return made


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return artifacts_folder(tmp_path_factory.mktemp("screenshots"))


def throughput_and_anatomy(marks: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    assert len(marks) == 2, marks  # the throughput chart, then the anatomy bars
    return marks[0], marks[1]


@pytest.mark.parametrize("name", ["short", "long", "failed"])
def test_every_chart_shows_marks_and_the_page_fits_desktop_and_phone(
    name: str, reports: dict[str, Any], artifacts: Path
) -> None:
    record = reports[name]
    assert record.report_path is not None
    with chromium() as browser:
        for width in (DESKTOP, PHONE):
            open_page(browser, record.report_path, width)
            page, window = overflow(browser)
            assert window == width
            assert page <= window, f"the {name} report is {page} px wide in a {window} px window"
            throughput, anatomy = throughput_and_anatomy(chart_marks(browser))
            # a dot per window of each rank, each painted on top where it is; a bar per part of each rank
            assert throughput["circle"] >= 2 and throughput["onTop"]["circle"] == throughput["circle"], (
                throughput
            )
            assert {t.split(" at ")[0] for t in throughput["titles"] if " at " in t} == {"rank 0", "rank 1"}
            computing = [t for t in anatomy["titles"] if ", computing: " in t]
            assert len(computing) == 2, anatomy
            assert anatomy["onTop"]["rect"] == anatomy["rect"], anatomy
            # the ranks' compute is the STEP_S sleep: the bars say so in ms
            assert all(float(t.split(": ")[1].split()[0]) >= STEP_S * 1000 * 0.9 for t in computing), (
                computing
            )
            assert throughput["width"] <= window and anatomy["width"] <= window
            table = browser.execute_script(
                "const d = document.querySelector('.scroll'); return d ? [d.scrollWidth, d.clientWidth] : null"
            )
            assert table is not None and table[1] <= window  # wider tables scroll inside their own box
            if width == DESKTOP:
                assert table[0] <= table[1], f"the table needs {table[0]} px, its box has {table[1]}"
            screenshot(browser, artifacts / f"report-{name}-{width}.png")
        top = visible_text(browser, "dl.facts")
        assert record.run_id in top and "status" in top


def test_a_short_run_says_it_was_too_short_for_a_curve_and_shows_one_dot_per_rank(
    reports: dict[str, Any],
) -> None:
    with chromium() as browser:
        open_page(browser, reports["short"].report_path, DESKTOP)
        throughput, _ = throughput_and_anatomy(chart_marks(browser))
        note = visible_text(browser, ".sr-note")
    # 3 steps are fewer than a window's 25 and last less than its 0.2 s: one window per rank
    assert throughput["circle"] == 2 and throughput["onTop"]["circle"] == 2
    assert "too short for a curve" in note


def test_a_long_run_draws_a_curve_per_rank_after_labelled_start_up_and_setup_bands(
    reports: dict[str, Any],
) -> None:
    with chromium() as browser:
        open_page(browser, reports["long"].report_path, DESKTOP)
        throughput, _ = throughput_and_anatomy(chart_marks(browser))
        caption = visible_text(browser, ".sr-caption")
        notes = visible_text(browser, ".sr-note")
    assert throughput["polyline"] == 2
    # 400 steps of >= 10 ms in windows of 0.2 s: at least 10 windows per rank (the note about short runs is gone)
    assert throughput["circle"] >= 20 and "too short" not in notes
    bands = {t.split(",")[0]: t for t in throughput["titles"] if t.startswith(("start-up", "setup"))}
    assert set(bands) == {"start-up", "setup"}, throughput["titles"][:5]
    # the ranks slept SETUP_S before their first step, so the setup band (on the run's clock) ends after SETUP_S;
    # its length is not checked: it starts when the last rank is up, and under load the ranks start apart
    setup = bands["setup"]
    ends_at, lasts = float(setup.split(" to ")[1].split(" s")[0]), float(setup.split("(")[1].split(" s)")[0])
    assert ends_at >= SETUP_S * 0.9 and lasts > 0, setup
    assert "start-up" in caption and "setup" in caption


def test_a_failed_run_shows_its_status_and_the_ranks_error_at_the_top(reports: dict[str, Any]) -> None:
    with chromium() as browser:
        open_page(browser, reports["failed"].report_path, DESKTOP)
        top = visible_text(browser, "dl.facts")
        error = visible_text(browser, ".error")
        heading = browser.execute_script("return document.querySelector('h1').getBoundingClientRect().top")
        error_at = browser.execute_script(
            "return document.querySelector('.error').getBoundingClientRect().top"
        )
    assert "failed: RankFailedError" in top
    assert reports["failed"].mlflow_run_id is not None and reports["failed"].mlflow_run_id in top
    assert "rank 1" in error and f"ValueError: the loss became NaN at step {FAIL_AT}" in error
    assert heading < error_at < 900  # on the first screen, under the title
