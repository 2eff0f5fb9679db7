"""The scale harness at 256 ranks: the real driver side reaches every simulated task and rank.

What reached the simulated side is counted by the simulated clients themselves (`bench/scale_ranks.py`),
independently of the driver's bookkeeping: a topology naming all 256 tasks at every task, an `Ack` of its
result at every rank. Figures (timings) are the bench's business, not this test's.
"""

from __future__ import annotations

import pytest

from bench.scale import measure

RANKS = 256


@pytest.mark.slow
def test_the_topology_and_the_run_end_reach_every_one_of_256_simulated_ranks() -> None:
    row = measure(RANKS, workers=4, total_lines=RANKS * 10)
    assert row.topologies == RANKS  # each counted by a task that got a topology of all 256 tasks
    assert row.acks == RANKS  # each counted by a rank whose result the driver acknowledged
    assert row.stacks_answered == RANKS  # every rank's Stacks reached the driver's dump
