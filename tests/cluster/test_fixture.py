"""The multi-host fixture is what it claims: 2 hosts x 2 slots, executors known by hostname, decoys first."""

from __future__ import annotations

import sys

import pytest

from sparkrunner.placement.slots import task_slots
from tests.cluster.fixtures import HOSTS, SLOTS_PER_HOST, TwoHosts, executor_hosts
from tests.cluster.netns_cluster import DECOY_LINK

pytestmark = [pytest.mark.spark, pytest.mark.slow]

_FIRST_INTERFACE = (
    "import psutil; print(next(a.address for name, addrs in psutil.net_if_addrs().items() if name != 'lo' "
    "for a in addrs if a.family == 2))"
)


def test_executors_are_reported_by_hostname_with_two_slots_each(two_hosts: TwoHosts) -> None:
    assert executor_hosts(two_hosts.spark) == sorted(two_hosts.cluster.hostnames)
    assert task_slots(two_hosts.spark.sparkContext) == HOSTS * SLOTS_PER_HOST


def test_a_naive_interface_choice_picks_the_unroutable_decoy(two_hosts: TwoHosts) -> None:
    cluster = two_hosts.cluster
    for i in range(HOSTS):
        assert cluster.run_in(i, [sys.executable, "-c", _FIRST_INTERFACE]).strip() == cluster.decoy_address
        # the decoy (same address on every host, like docker0) reaches no other host
        other = cluster.worker_addresses[(i + 1) % HOSTS]
        route = cluster.run_in(i, ["ip", "-4", "route", "get", other, "from", cluster.decoy_address])
        assert DECOY_LINK not in route
