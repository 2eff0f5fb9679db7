"""The multi-host fixture: 2 hosts (network namespaces) x 2 task slots, executors known by hostname, decoys.

`netns_cluster` starts the hosts once per test session; `two_hosts` gives each module a SparkSession on them,
with every executor registered. Registered as a plugin in tests/conftest.py, so any test module can use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkrunner.placement.slots import task_slots
from tests.conftest import spark_session, stop_spark_session
from tests.scenarios.cluster.netns_cluster import NetnsCluster, can_create_namespaces
from tests.waiting import wait_until

HOSTS = 2
SLOTS_PER_HOST = 2
_REGISTER_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class TwoHosts:
    cluster: NetnsCluster
    spark: Any

    @property
    def slots(self) -> int:
        return HOSTS * SLOTS_PER_HOST


def skip_without_namespaces() -> None:
    why = can_create_namespaces()
    if why is not None:
        pytest.skip(f"multi-host cluster tests skipped: {why}")


def session_on(cluster: NetnsCluster, **conf: str) -> Any:
    """A SparkSession whose driver listens on the cluster's bridge address (reachable from every host)."""
    driver = {"spark.driver.host": cluster.master_host, "spark.driver.bindAddress": cluster.master_host}
    return spark_session(cluster.url, **driver, **conf)


def executor_hosts(spark: Any) -> list[str]:
    """The hosts of the registered executors, as Spark reports them (the driver left out)."""
    driver = spark.sparkContext.getConf().get("spark.driver.host")
    return sorted(e.host for e in spark.sparkContext.statusTracker().getExecutorInfos() if e.host != driver)


def run_leftovers_on_hosts(cluster: NetnsCluster) -> dict[str, list[str]]:
    """Command lines of sparkrunner's processes (ranks, mpirun, its daemons, the rsh agent) still in each host's
    namespace, read from the process table: empty lists when a run left nothing behind."""
    ours = ("orted", "mpirun", "sparkrunner.ranks.bootstrap", "rsh_agent")
    found: dict[str, list[str]] = {}
    for ns in cluster.namespaces:
        lines = []
        for pid in cluster.pids_in(ns):
            with contextlib.suppress(OSError):
                lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        found[ns] = [line for line in lines if any(word in line for word in ours)]
    return found


@pytest.fixture(scope="session")
def netns_cluster() -> Iterator[NetnsCluster]:
    """The hosts and their Spark master and workers, for the whole test session; removed even on failure."""
    skip_without_namespaces()
    cluster = NetnsCluster(hosts=HOSTS, slots_per_host=SLOTS_PER_HOST)
    try:
        cluster.start()
        yield cluster
    finally:
        stop_spark_session(cluster.url)  # before the workers go, so no executor waits for its driver
        cluster.close()


@pytest.fixture(scope="module")
def two_hosts(netns_cluster: NetnsCluster) -> TwoHosts:
    """A SparkSession on the two hosts with all 4 task slots registered."""
    return registered(netns_cluster, session_on(netns_cluster), HOSTS * SLOTS_PER_HOST)


def registered(netns_cluster: NetnsCluster, spark: Any, slots: int) -> TwoHosts:
    """Wait until `spark` has an executor on every host and `slots` task slots."""
    wait_until(
        lambda: task_slots(spark.sparkContext) >= slots and len(executor_hosts(spark)) >= HOSTS,
        _REGISTER_TIMEOUT_S,
        f"the executors registering on every host (see {netns_cluster.logs})",
    )
    return TwoHosts(netns_cluster, spark)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules on the hosts' shared session (`two_hosts`) before those that start a session of their own on
    the same hosts (other settings), each module's tests kept together and in order: the group of the hosts'
    modules (tests/group_order.py keeps this order within a group) starts each session once, where the modules'
    alphabetical order would switch between them and start the shared one three times."""

    def own_session(item: pytest.Item) -> bool:
        names = set(getattr(item, "fixturenames", ()))
        return "netns_cluster" in names and "two_hosts" not in names

    later = {item.path for item in items if own_session(item)}
    items.sort(key=lambda item: item.path in later)
