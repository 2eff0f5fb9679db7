"""Rank and task kept apart in `Topology` (pure logic, no Spark): one peer per rank, each naming its task; and how
many ranks a task starts for the GPUs it has."""

from __future__ import annotations

import pytest

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.topology import Peer, RankIndex, TaskIndex, Topology, ranks_per_task


def _two_ranks_per_task(hosts: list[str]) -> Topology:
    """Task t on hosts[t], holding ranks 2t and 2t+1 (built by hand: the oracle is the layout itself)."""
    return Topology(
        tuple(Peer(h, (10 * t + j,), (), TaskIndex(t)) for t, h in enumerate(hosts) for j in range(2))
    )


def test_task_of_each_rank() -> None:
    t = _two_ranks_per_task(["a", "b", "a"])
    assert [t.peers[RankIndex(r)].task for r in range(t.size)] == [0, 0, 1, 1, 2, 2]
    assert (t.size, t.num_tasks) == (6, 3)


def test_host_order_keeps_each_rank_with_its_task() -> None:
    t = _two_ranks_per_task(["a", "b", "a"]).in_host_order()
    assert [(p.host, p.task) for p in t.peers] == [("a", 0), ("a", 0), ("a", 2), ("a", 2), ("b", 1), ("b", 1)]


def test_json_round_trip_keeps_tasks() -> None:
    t = _two_ranks_per_task(["a", "b"])
    assert Topology.from_json(t.to_json()) == t


def test_ranks_per_task_is_asked_else_one_per_gpu_of_a_task() -> None:
    """The arithmetic alone (Spark's GPU amount is read by the driver): one rank per GPU when a task has several."""
    assert ranks_per_task(-4, None, 8.0) == 1, "a run on the driver has no tasks"
    assert ranks_per_task(4, 2, 8.0) == 2, "asked for"
    assert [ranks_per_task(4, None, g) for g in (0.0, 1.0, 0.5, 2.5, 2.0, 4.0)] == [1, 1, 1, 1, 2, 4]
    with pytest.raises(InvalidArgumentError, match="np=6 is not a multiple of 4; pass ranks_per_task"):
        ranks_per_task(6, None, 4.0)
