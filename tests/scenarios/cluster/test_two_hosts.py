"""Runs across two hosts with two task slots each (the multi-host fixture), on every launcher: collectives go
over the interface that joins the hosts (never the docker0 decoy), and every port comes from the port range.
(DDP's training in lockstep on two hosts is checked by its resume in tests/scenarios/cluster/test_resume_two_hosts.py.)"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparkrunner import Runner
from sparkrunner.common.environment import Env
from sparkrunner.placement.spark import SparkPlacement
from tests.launch.test_outliving_rank import assert_rank_zero_outlived
from tests.scenarios.cluster.fixtures import TwoHosts
from tests.scenarios.cluster.netns_cluster import DECOY_LINK

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PORT_RANGE = (41000, 41200)


def runner(two_hosts: TwoHosts, launcher: str, **options: Any) -> Runner:
    return Runner(
        np=two_hosts.slots,
        spark=two_hosts.spark,
        launcher=launcher,
        start_timeout=180,
        timeout=300,
        **options,
    )


def network_view() -> dict[str, Any]:
    """A gloo allreduce over all ranks, then every rank's view of the network variables sparkrunner set."""
    import socket

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    names = [
        "MASTER_ADDR",
        "MASTER_PORT",
        "GLOO_SOCKET_IFNAME",
        "NCCL_SOCKET_IFNAME",
        "TF_CONFIG",
        Env.DRIVER,
    ]
    mine = {name: os.environ.get(name) for name in names} | {"hostname": socket.gethostname()}
    views: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(views, mine)
    dist.destroy_process_group()
    return {"total": float(total), "views": views}


def assert_wired_to_the_real_interface(two_hosts: TwoHosts, result: dict[str, Any]) -> None:
    cluster = two_hosts.cluster
    assert result["total"] == sum(range(1, two_hosts.slots + 1))
    views = result["views"]
    assert sorted(v["hostname"] for v in views) == sorted(cluster.hostnames * 2)  # 2 ranks on each host
    for view in views:
        assert view["MASTER_ADDR"] in cluster.worker_addresses
        assert view["GLOO_SOCKET_IFNAME"] == view["NCCL_SOCKET_IFNAME"] != DECOY_LINK
        assert view["GLOO_SOCKET_IFNAME"].startswith("srb")  # the veth into the hosts' bridge
        assert view[Env.DRIVER].rsplit(":", 1)[0] == cluster.master_host


def test_every_port_comes_from_the_port_range(two_hosts: TwoHosts, launcher: str) -> None:
    """A gloo all-reduce over the routable interface (never the decoy), every port from the range: a range
    changes which ports are chosen, not the interface, so this is also the plain two-host all-reduce."""
    result = runner(two_hosts, launcher, port_range=PORT_RANGE).run(network_view)
    assert_wired_to_the_real_interface(two_hosts, result)
    low, high = PORT_RANGE
    for view in result["views"]:
        tf_ports = [int(w.rsplit(":", 1)[1]) for w in json.loads(view["TF_CONFIG"])["cluster"]["worker"]]
        ports = [int(view["MASTER_PORT"]), int(view[Env.DRIVER].rsplit(":", 1)[1]), *tf_ports]
        assert all(low <= port <= high for port in ports), ports


def test_the_driver_channel_listens_on_the_drivers_address(two_hosts: TwoHosts) -> None:
    from sparkrunner.driver.launcher_choice import resolve_launcher

    placement = SparkPlacement(two_hosts.spark, two_hosts.slots, resolve_launcher("direct"))
    assert placement.bind_host == two_hosts.cluster.master_host != "0.0.0.0"


def test_rank_zero_outlives_its_peers_on_two_hosts(two_hosts: TwoHosts, launcher: str) -> None:
    assert_rank_zero_outlived(runner(two_hosts, launcher))


def test_tensorflow_multi_worker_fit_on_two_hosts(two_hosts: TwoHosts, tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    from tests.frameworks.tensorflow.training import keras_mwms_train

    # two epochs are enough for the loss check: the second epoch's mean loss was 0.033 against the first's 6.3
    # (TensorFlow 2.21, 4 workers on the two hosts), far under half of it
    result = runner(two_hosts, "direct").run(keras_mwms_train, str(tmp_path), epochs=2)
    assert result["replicas"] == two_hosts.slots
    assert result["loss"][-1] < result["loss"][0] * 0.5, result["loss"]
    weights = [np.load(tmp_path / f"rank{r}.npz") for r in range(two_hosts.slots)]
    for other in weights[1:]:
        for name in weights[0].files:
            np.testing.assert_array_equal(other[name], weights[0][name])


def single_process_fit(initial: list[list[float]], world: int) -> list[list[float]]:
    """The oracle for Lightning DDP at `world` ranks: one process, one SGD step per step on the ranks' batches
    together (Lightning gives each rank torch's DistributedSampler, shuffled with seed 0 and the epoch; DDP
    averages the gradients of the ranks' mean losses)."""
    import torch
    from torch.utils.data import DistributedSampler

    from tests.frameworks.test_lightning import BATCH, EPOCHS, SAMPLES

    x = torch.arange(SAMPLES * 4, dtype=torch.float32).reshape(SAMPLES, 4) / (SAMPLES * 4)
    y = x.sum(dim=1, keepdim=True)
    samplers = [DistributedSampler(range(SAMPLES), world, r, shuffle=True, seed=0) for r in range(world)]
    layer = torch.nn.Linear(4, 1)
    with torch.no_grad():
        for param, values in zip(layer.parameters(), initial, strict=True):
            param.copy_(torch.tensor(values).reshape(param.shape))
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    for epoch in range(EPOCHS):
        for sampler in samplers:
            sampler.set_epoch(epoch)
        shards = [list(sampler) for sampler in samplers]
        for start in range(0, len(shards[0]), BATCH):
            optimizer.zero_grad()
            batches = [torch.tensor(shard[start : start + BATCH]) for shard in shards]
            losses = [torch.nn.functional.mse_loss(layer(x[b]), y[b]) for b in batches]
            torch.stack(losses).mean().backward()
            optimizer.step()
    return [p.detach().flatten().tolist() for p in layer.parameters()]


def test_lightning_ddp_on_two_hosts_with_uneven_ranks(two_hosts: TwoHosts) -> None:
    """np=3 on two hosts of two slots: 2 ranks on one host, 1 on the other; Lightning with
    sparkrunner.lightning.ddp() trains on all three as one single-process run on the union of their batches."""
    from tests.frameworks.test_lightning import BATCH, EPOCHS, SAMPLES, fit_one_replica

    uneven = Runner(np=3, spark=two_hosts.spark, launcher="direct", start_timeout=180, timeout=300)
    views = uneven.run_all(fit_one_replica, SAMPLES, BATCH, EPOCHS)
    per_host = sorted([v["local_rank"] for v in views if v["host"] == h] for h in {v["host"] for v in views})
    assert per_host == [[0], [0, 1]], views  # uneven: 2 + 1
    assert [(v["rank"], v["global_rank"], v["world_size"]) for v in views] == [(r, r, 3) for r in range(3)]
    expected = single_process_fit(views[0]["initial"], world=3)
    assert views[0]["initial"] != views[1]["initial"], "each rank starts from its own weights: DDP must sync"
    for view in views:
        assert np.allclose(np.concatenate(view["weights"]), np.concatenate(expected), atol=1e-6), view
