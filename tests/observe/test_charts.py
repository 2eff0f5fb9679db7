"""The charts' arithmetic on windows made here: where the phases before the first step end, how a long run's
windows are merged into at most MAX_DOTS dots per rank, and the note a run too short for a curve gets."""

from __future__ import annotations

import re

from sparkrunner.observe.charts import MAX_DOTS, Timeline, phases, throughput_svg
from sparkrunner.observe.events import AnatomyEvent


def window(index: int, step_s: float, span_s: float, steps: int = 25) -> AnatomyEvent:
    median = {"step": step_s, "data": 0.0, "comm": 0.0, "compute": step_s, "own": step_s}
    return AnatomyEvent(index, steps, median, median, "host-a", None, None, False, span_s)


def dots(svg: str) -> list[str]:
    return re.findall(r"<title>(rank \d+ at [^<]*)</title>", svg)


def test_start_up_lasts_until_the_last_rank_connected_and_setup_until_the_first_step_began() -> None:
    # rank 1 connected at 2.5 s; rank 0's first window (2 s of steps) reached the driver at 9 s: it began at 7 s
    timeline = Timeline([(0, 9.0, window(0, 0.08, 2.0)), (1, 9.5, window(0, 0.08, 2.0))], {0: 1.0, 1: 2.5})
    found = [(p.name, p.start, p.end) for p in phases(timeline)]
    assert found == [("start-up", 0.0, 2.5), ("setup", 2.5, 7.0)]


def test_a_long_run_gets_at_most_max_dots_per_rank_each_the_overall_rate_of_the_windows_it_merges() -> None:
    # 2 * MAX_DOTS windows of 25 steps alternating 10 and 30 steps/s: merged by pairs, 50 steps in 2.5 + 0.83 s
    windows = [(0, 5.0 + i, window(i, 0.1 if i % 2 == 0 else 1 / 30, 1.0)) for i in range(2 * MAX_DOTS)]
    shown = dots(throughput_svg(Timeline(windows, {0: 0.5})))
    assert len(shown) == MAX_DOTS
    assert all(": 15 steps/s over 50 steps" in dot for dot in shown), shown[:3]


def test_a_run_too_short_for_a_curve_says_so_and_draws_a_dot_per_window() -> None:
    svg = throughput_svg(Timeline([(0, 3.0, window(0, 0.05, 0.15, 3)), (1, 3.1, window(0, 0.05, 0.15, 3))]))
    assert len(dots(svg)) == 2 and "<polyline" not in svg
    assert "too short for a curve" in svg
