"""The multi-host fixture is what it claims: 2 hosts x 2 slots, executors known by hostname, decoys first."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrunner.placement.slots import task_slots
from tests.helpers import driver, start_driver, wait_for_line
from tests.scenarios.cluster.fixtures import (
    HOSTS,
    SLOTS_PER_HOST,
    TwoHosts,
    executor_hosts,
    skip_without_namespaces,
)
from tests.scenarios.cluster.netns_cluster import DECOY_LINK, NetnsCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_executors_are_reported_by_hostname_with_two_slots_each(two_hosts: TwoHosts) -> None:
    assert executor_hosts(two_hosts.spark) == sorted(two_hosts.cluster.hostnames)
    assert task_slots(two_hosts.spark.sparkContext) == HOSTS * SLOTS_PER_HOST


def test_a_naive_interface_choice_picks_the_unroutable_decoy(two_hosts: TwoHosts) -> None:
    cluster = two_hosts.cluster
    for i in range(HOSTS):
        assert (
            cluster.run_in(i, [sys.executable, str(driver("first_interface"))]).strip()
            == cluster.decoy_address
        )
        # the decoy (same address on every host, like docker0) reaches no other host
        other = cluster.worker_addresses[(i + 1) % HOSTS]
        route = cluster.run_in(i, ["ip", "-4", "route", "get", other, "from", cluster.decoy_address])
        assert DECOY_LINK not in route


def _spark_daemons_tagged(owner: str) -> list[int]:
    """The test's own /proc scan (not the fixture's): processes whose environment names the cluster's folder."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if (
                entry.name.isdigit()
                and f"sparkrunner-netns-{owner}/".encode() in (entry / "environ").read_bytes()
            ):
                found.append(int(entry.name))
    return found


def test_what_a_killed_test_run_left_behind_is_removed_by_the_next_cluster() -> None:
    skip_without_namespaces()
    hanging = start_driver("netns_cluster_left_running")
    _, owner, namespace = wait_for_line(hanging, "cluster ")[-1].split()
    hanging.kill()  # as a killed pytest: no close()
    hanging.wait()
    assert namespace in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert _spark_daemons_tagged(owner)  # its master outlived it
    assert owner in Path("/etc/hosts").read_text()
    next_cluster = NetnsCluster(1, 1, variant=8)
    try:
        next_cluster.start(workers=0)
        assert namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert (
            f"srb{owner}" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        )
        assert owner not in Path("/etc/hosts").read_text()
        assert _spark_daemons_tagged(owner) == []
    finally:
        next_cluster.close()
