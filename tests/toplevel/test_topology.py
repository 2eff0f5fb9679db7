"""Topology arithmetic that every launcher relies on."""

from __future__ import annotations

from sparkrunner.topology import Peer, PortUse, Topology


def _topology(*hosts: str) -> Topology:
    return Topology(tuple(Peer(h, (10 * i, 10 * i + 1, 10 * i + 2, 10 * i + 3)) for i, h in enumerate(hosts)))


def test_local_ranks_and_sizes_follow_hosts() -> None:
    t = _topology("a", "b", "a")
    assert [t.local_rank(i) for i in range(3)] == [0, 0, 1]
    assert [t.local_world_size(i) for i in range(3)] == [2, 1, 2]
    assert t.hosts() == ["a", "b"]


def test_mpirun_order_groups_ranks_by_host_and_keeps_each_hosts_ports() -> None:
    t = _topology("a", "b", "a").in_host_order()
    assert [p.host for p in t.peers] == ["a", "a", "b"]
    assert [p.ports[PortUse.TORCH_MASTER] for p in t.peers] == [0, 20, 10]


def test_json_round_trip() -> None:
    t = Topology((Peer("h", (1, 2, 3, 4), ("0",)), Peer("g", (5, 6, 7, 8))))
    assert Topology.from_json(t.to_json()) == t
