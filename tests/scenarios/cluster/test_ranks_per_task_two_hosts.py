"""Several ranks per task across two hosts (the multi-host fixture, with spark.task.cpus=2 so each host has
one task slot and each barrier task lands on its own host): Runner(np=4, ranks_per_task=2), launchers
`direct` and `mpirun`. Each host runs one task of two ranks; the world of four agrees on a Gloo allreduce."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from sparkrunner import Runner
from tests.helpers import leftover_rank_processes
from tests.matrix import LAUNCHERS
from tests.scenarios.cluster.fixtures import HOSTS, TwoHosts, registered, run_leftovers_on_hosts, session_on
from tests.scenarios.cluster.netns_cluster import NetnsCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def one_slot_per_host(netns_cluster: NetnsCluster) -> TwoHosts:
    """A SparkSession on the two hosts whose tasks take both cores of a host: one task slot per host."""
    return registered(netns_cluster, session_on(netns_cluster, **{"spark.task.cpus": "2"}), HOSTS)


def rank_view() -> dict[str, Any]:
    import socket

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([int(os.environ["RANK"]) + 1])
    dist.all_reduce(total)
    dist.destroy_process_group()
    keys = (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "SPARKRUNNER_STARTED_BY_TASK",
    )
    return {**{k: int(os.environ[k]) for k in keys}, "sum": int(total.item()), "host": socket.gethostname()}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_ranks_per_task_on_each_of_two_hosts(one_slot_per_host: TwoHosts, launcher: str) -> None:
    cluster = one_slot_per_host.cluster
    runner = Runner(
        np=4,
        ranks_per_task=2,
        spark=one_slot_per_host.spark,
        launcher=launcher,
        start_timeout=180,
        timeout=300,
    )
    views = runner.run_all(rank_view)
    assert [v["RANK"] for v in views] == [0, 1, 2, 3]
    assert all(v["WORLD_SIZE"] == 4 and v["sum"] == 1 + 2 + 3 + 4 for v in views), views
    by_host: dict[str, list[dict[str, Any]]] = {}
    for view in views:
        by_host.setdefault(view["host"], []).append(view)
    assert sorted(by_host) == sorted(cluster.hostnames), "one task of two ranks on each host"
    for node, first in enumerate((0, 2)):  # task 0 holds ranks 0-1 (node 0), task 1 ranks 2-3 (node 1)
        host = views[first]["host"]
        assert [v["RANK"] for v in by_host[host]] == [first, first + 1]
        assert [v["LOCAL_RANK"] for v in by_host[host]] == [0, 1]
        assert {(v["LOCAL_WORLD_SIZE"], v["NODE_RANK"]) for v in by_host[host]} == {(2, node)}
        # the barrier task that started them (mpirun: task 0 for its own host, task 1's agent for the other)
        assert {v["SPARKRUNNER_STARTED_BY_TASK"] for v in by_host[host]} == {node}
    assert leftover_rank_processes(grace_s=10) == {}
    assert run_leftovers_on_hosts(cluster) == {ns: [] for ns in cluster.namespaces}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_stock_lightning_ddp_one_rank_per_host(one_slot_per_host: TwoHosts, launcher: str) -> None:
    """Lightning code written for TorchDistributor, `Trainer(strategy="ddp", devices=1, num_nodes=2)`, one rank
    per host: it trains unchanged, as one process stepping on both ranks' batches together."""
    from tests.frameworks.test_lightning import BATCH, EPOCHS, SAMPLES, fit_one_replica
    from tests.scenarios.cluster.test_two_hosts import single_process_fit

    stock = {"strategy": "ddp", "devices": 1, "num_nodes": HOSTS}
    runner = Runner(
        np=HOSTS, spark=one_slot_per_host.spark, launcher=launcher, start_timeout=180, timeout=300
    )
    views = runner.run_all(fit_one_replica, SAMPLES, BATCH, EPOCHS, stock)
    assert sorted(v["host"] for v in views) == sorted(one_slot_per_host.cluster.hostnames), views
    assert [(v["rank"], v["global_rank"], v["world_size"]) for v in views] == [
        (r, r, HOSTS) for r in range(HOSTS)
    ]
    assert views[0]["initial"] != views[1]["initial"], "each rank starts from its own weights: DDP must sync"
    expected = np.concatenate(single_process_fit(views[0]["initial"], world=HOSTS))
    for view in views:
        assert np.allclose(np.concatenate(view["weights"]), expected, atol=1e-6), view
