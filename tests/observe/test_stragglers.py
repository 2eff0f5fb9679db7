"""Straggler detection on hand-made windows and on a rank clock's own windows (checkpoint saves left out),
and the rank's summaries against numpy's percentiles."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import sparkrunner
from sparkrunner.channel.messages import StepAnatomy
from sparkrunner.observe.stragglers import StragglerDetector
from sparkrunner.ranks import anatomy
from sparkrunner.ranks.anatomy import RUN_SAMPLE_STEPS, WINDOW_STEPS, StepClock, summarize


def window(index: int, data: float, compute: float) -> StepAnatomy:
    median = {"data": data, "compute": compute, "own": data + compute, "comm": 0.0, "step": 0.1}
    return StepAnatomy(index, 25, median, median, "host-b", 3, "2", False, 2.5)


def feed(detector: StragglerDetector, windows: list[dict[int, tuple[float, float]]]) -> list:
    found = []
    for index, ranks in enumerate(windows):
        for rank, (data, compute) in ranks.items():
            found += detector.add(rank, window(index, data, compute))
    return found


HEALTHY = {0: (0.01, 0.05), 1: (0.01, 0.05), 2: (0.01, 0.05)}


def test_a_rank_slow_in_two_windows_is_named_once_with_the_larger_gap() -> None:
    slow = {**HEALTHY, 3: (0.025, 0.05)}  # own 0.075 against 0.06: 25% slower, all of it data
    found = feed(StragglerDetector(4), [slow, slow, slow])
    assert [(s.rank, s.cause, round(s.slower, 2)) for s in found] == [(3, "data", 0.25)]
    assert found[0].message().startswith("rank 3 on host-b (executor 2, barrier task 3): 25% slower")
    assert found[0].message().endswith("most of the extra time is waiting for data")


@pytest.mark.parametrize(
    "windows",
    [
        [{**HEALTHY, 3: (0.01, 0.059)}] * 3,  # 15% slower: under the threshold
        [{**HEALTHY, 3: (0.01, 0.08)}, {**HEALTHY, 3: (0.01, 0.05)}] * 2,  # slow, never two windows running
    ],
)
def test_a_gap_under_the_threshold_or_not_sustained_is_not_named(windows: list) -> None:
    assert feed(StragglerDetector(4), windows) == []


def test_two_ranks_are_not_judged() -> None:
    assert feed(StragglerDetector(2), [{0: (0.01, 0.05), 1: (0.01, 0.5)}] * 3) == []


def test_summaries_match_numpy_percentiles() -> None:
    rng = np.random.default_rng(0)
    values = rng.uniform(0.0, 0.01, size=(101, 3))
    values[:, 0] += 0.03  # step, data, comm: the step outlasts its parts
    rows = [tuple(v) for v in values]
    median, p95 = summarize(rows)
    step, data, comm = (np.array(c) for c in zip(*rows, strict=True))
    for part, values in {"step": step, "data": data, "comm": comm, "own": step - comm}.items():
        assert median[part] == pytest.approx(np.percentile(values, 50))
        assert p95[part] == pytest.approx(np.percentile(values, 95))
    assert median["compute"] == pytest.approx(np.percentile(step - data - comm, 50))


def test_the_runs_summary_keeps_a_bounded_uniform_sample_of_its_steps() -> None:
    """A long run keeps at most RUN_SAMPLE_STEPS rows on the rank, and their median stays the run's: the oracle
    is numpy's median over every step, computed here."""
    steps = 5 * RUN_SAMPLE_STEPS
    durations = np.random.default_rng(1).exponential(0.05, steps)
    clock = StepClock()
    clock._boundary(0.0)  # the first step starts at 0
    for t in np.cumsum(durations):
        clock._boundary(float(t))
    kept = clock._all
    assert len(kept) == RUN_SAMPLE_STEPS
    sampled_median = summarize(kept)[0]["step"]
    assert sampled_median == pytest.approx(float(np.median(durations)), rel=0.05)


STEP_S, SAVE_S = 0.05, 0.03  # a save makes its step 60% longer


@pytest.mark.parametrize("through_sparkrunner", [True, False])
def test_steps_that_save_a_checkpoint_are_left_out_of_the_straggler_windows(
    through_sparkrunner: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 saves a checkpoint in two steps out of three, enough to move its medians: through
    `sparkrunner.save_checkpoint` nothing is named; the same extra time spent otherwise names rank 0 (the
    oracle that the scenario would read as straggling)."""
    monkeypatch.setenv("SPARKRUNNER_CHECKPOINT_DIR", str(tmp_path))
    sent: list[StepAnatomy] = []
    monkeypatch.setattr(anatomy, "send_to_driver", sent.append)
    detector, found = StragglerDetector(4), []
    for rank in range(4):
        clock, now = StepClock(), 0.0
        monkeypatch.setattr(anatomy, "_clock", clock)
        clock._boundary(now)
        for step in range(2 * WINDOW_STEPS):
            saves = rank == 0 and step % 3 != 2
            if saves and through_sparkrunner:
                sparkrunner.save_checkpoint({"step": step}, step=step)
            now += STEP_S + (SAVE_S if saves else 0.0)
            clock._boundary(now)
        clock.finish()
        found += [s for message in sent for s in detector.add(rank, message)]
        sent.clear()
    assert [(s.rank, s.cause) for s in found] == ([] if through_sparkrunner else [(0, "compute")])


def test_a_window_says_how_long_ago_its_first_step_began(monkeypatch: pytest.MonkeyPatch) -> None:
    """`span_s` (where the driver places a window and the run's first step) against this test's own clock:
    at least the window's sleeps, at most the time the loop took."""
    sent: list[StepAnatomy] = []
    monkeypatch.setattr(anatomy, "send_to_driver", sent.append)
    clock, source, batches = StepClock(), object(), iter(range(WINDOW_STEPS + 1))
    began = time.monotonic()
    for _ in range(WINDOW_STEPS + 1):  # the 26th request ends the 25th step: the window is sent
        clock.fetch(source, batches)
        time.sleep(0.004)
    clock.finish()
    ended = time.monotonic()
    window, run = sent
    assert not window.final and run.final
    assert WINDOW_STEPS * 0.004 <= window.span_s <= run.span_s <= ended - began
