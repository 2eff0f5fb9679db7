"""The multi-host fixture: 2 hosts (network namespaces) x 2 task slots, executors known by hostname, decoys.

`netns_cluster` starts the hosts once per test session; `two_hosts` gives each module a SparkSession on them,
with every executor registered. Registered as a plugin in tests/conftest.py, so any test module can use it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sparkrunner.placement.slots import task_slots
from tests.cluster.netns_cluster import NetnsCluster, can_create_namespaces
from tests.conftest import spark_session, stop_spark_session

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


def session_on(cluster: NetnsCluster) -> Any:
    """A SparkSession whose driver listens on the cluster's bridge address (reachable from every host)."""
    driver = {"spark.driver.host": cluster.master_host, "spark.driver.bindAddress": cluster.master_host}
    return spark_session(cluster.url, **driver)


def executor_hosts(spark: Any) -> list[str]:
    """The hosts of the registered executors, as Spark reports them (the driver left out)."""
    driver = spark.sparkContext.getConf().get("spark.driver.host")
    return sorted(e.host for e in spark.sparkContext.statusTracker().getExecutorInfos() if e.host != driver)


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
    spark = session_on(netns_cluster)
    deadline = time.monotonic() + _REGISTER_TIMEOUT_S
    while task_slots(spark.sparkContext) < HOSTS * SLOTS_PER_HOST or len(executor_hosts(spark)) < HOSTS:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"the executors did not register in {_REGISTER_TIMEOUT_S} s; see {netns_cluster.logs}"
            )
        time.sleep(0.5)
    return TwoHosts(netns_cluster, spark)
