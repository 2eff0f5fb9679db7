"""Runner(np=4, launcher="mpirun") across two real hosts: network namespaces with their own addresses,
a Spark standalone master and one worker per host. Remote ranks must start through the task agent."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from tests.conftest import spark_session
from tests.helpers import rank_processes
from tests.horovod import hvd_functions
from tests.horovod.netns_cluster import NetnsCluster, can_create_namespaces

pytestmark = [pytest.mark.spark, pytest.mark.slow]

_why_not = can_create_namespaces()
if _why_not is not None:
    pytest.skip(f"multi-host test skipped: {_why_not}", allow_module_level=True)


@pytest.fixture(scope="module")
def two_hosts() -> Iterator[tuple[NetnsCluster, Any]]:
    cluster = NetnsCluster(hosts=2, cores_per_host=2)
    spark = None
    try:
        url = cluster.start()
        driver = {"spark.driver.host": cluster.master_host, "spark.driver.bindAddress": cluster.master_host}
        spark = spark_session(url, **driver)
        yield cluster, spark
    finally:
        if spark is not None:
            spark.stop()  # before the workers go, so no executor is left waiting for its driver
        cluster.close()


def _command_lines(pids: list[int]) -> list[str]:
    lines = []
    for pid in pids:
        with contextlib.suppress(OSError):
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return lines


def test_mpirun_across_two_namespace_hosts(two_hosts: tuple[NetnsCluster, Any]) -> None:
    cluster, spark = two_hosts
    runner = Runner(np=4, spark=spark, launcher="mpirun", start_timeout=120, timeout=300)
    result = runner.run(hvd_functions.sum_ranks)
    assert (result["size"], result["total"]) == (4, 1.0 + 2.0 + 3.0 + 4.0)

    starters: dict[str, list[str | None]] = {host: [] for host in cluster.worker_hosts}
    for rank in result["ranks"]:
        (host,) = set(rank["addresses"]) & set(cluster.worker_hosts)
        starters[host].append(rank["started_by_task"])
    assert sorted(len(s) for s in starters.values()) == [2, 2]  # two ranks on each of two distinct hosts
    # task 0's host: mpirun started its ranks itself; the other host: the task agent of one barrier task did
    local, remote = sorted(starters.values(), key=lambda s: s[0] is not None)
    assert local == [None, None]
    assert remote[0] is not None and remote[0].isdigit() and remote[0] == remote[1]

    assert rank_processes(result["ranks"][0]["run_id"]) == {}
    for ns in cluster.namespaces:
        ours = ("orted", "mpirun", "sparkrunner.worker", "rsh_agent")
        leftovers = [c for c in _command_lines(cluster.pids_in(ns)) if any(word in c for word in ours)]
        assert leftovers == [], f"left running in {ns}: {leftovers}"
