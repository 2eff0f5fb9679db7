"""Runner(np=4, launcher="mpirun") across two real hosts: network namespaces with their own addresses,
a Spark standalone master and one worker per host. Remote ranks must start through the task agent."""

from __future__ import annotations

import pytest

from sparkrunner import Runner
from tests.frameworks.horovod import hvd_functions
from tests.helpers import rank_processes
from tests.scenarios.cluster.fixtures import TwoHosts, run_leftovers_on_hosts

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_mpirun_across_two_namespace_hosts(two_hosts: TwoHosts) -> None:
    cluster = two_hosts.cluster
    runner = Runner(np=4, spark=two_hosts.spark, launcher="mpirun", start_timeout=120, timeout=300)
    result = runner.run(hvd_functions.sum_ranks)
    assert (result["size"], result["total"]) == (4, 1.0 + 2.0 + 3.0 + 4.0)

    starters: dict[str, list[str | None]] = {host: [] for host in cluster.worker_addresses}
    for rank in result["ranks"]:
        (host,) = set(rank["addresses"]) & set(cluster.worker_addresses)
        starters[host].append(rank["started_by_task"])
    assert sorted(len(s) for s in starters.values()) == [2, 2]  # two ranks on each of two distinct hosts
    # task 0's host: task 0's mpirun started its ranks; the other host: the task agent of another task did
    local, remote = sorted(starters.values(), key=lambda s: s[0] != "0")
    assert local == ["0", "0"]
    assert remote[0] is not None and remote[0].isdigit() and remote[0] != "0" and remote[0] == remote[1]

    assert rank_processes(result["ranks"][0]["run_id"]) == {}
    assert run_leftovers_on_hosts(cluster) == {ns: [] for ns in cluster.namespaces}
