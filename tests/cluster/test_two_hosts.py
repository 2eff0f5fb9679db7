"""Runs across two hosts with two task slots each (the multi-host fixture), on every launcher: collectives go
over the interface that joins the hosts (never the docker0 decoy), and every port comes from the port range."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparkrunner import Runner
from sparkrunner.channel.environment import Env
from sparkrunner.placement.spark import SparkPlacement
from tests.cluster.fixtures import TwoHosts
from tests.cluster.netns_cluster import DECOY_LINK
from tests.launch.test_outliving_rank import assert_rank_zero_outlived
from tests.runner.training import assert_trained_in_lockstep, ddp_train

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


def test_torch_gloo_allreduce_over_the_routable_interface(two_hosts: TwoHosts, launcher: str) -> None:
    assert_wired_to_the_real_interface(two_hosts, runner(two_hosts, launcher).run(network_view))


def test_ddp_training_on_two_hosts(two_hosts: TwoHosts) -> None:
    assert_trained_in_lockstep(runner(two_hosts, "direct").run(ddp_train), world=two_hosts.slots)


def test_every_port_comes_from_the_port_range(two_hosts: TwoHosts, launcher: str) -> None:
    result = runner(two_hosts, launcher, port_range=PORT_RANGE).run(network_view)
    assert_wired_to_the_real_interface(two_hosts, result)
    low, high = PORT_RANGE
    for view in result["views"]:
        tf_ports = [int(w.rsplit(":", 1)[1]) for w in json.loads(view["TF_CONFIG"])["cluster"]["worker"]]
        ports = [int(view["MASTER_PORT"]), int(view[Env.DRIVER].rsplit(":", 1)[1]), *tf_ports]
        assert all(low <= port <= high for port in ports), ports


def test_the_driver_channel_listens_on_the_drivers_address(two_hosts: TwoHosts) -> None:
    from sparkrunner.launch import resolve_launcher

    placement = SparkPlacement(two_hosts.spark, two_hosts.slots, resolve_launcher("direct"), 10.0)
    assert placement.bind_host == two_hosts.cluster.master_host != "0.0.0.0"


def test_rank_zero_outlives_its_peers_on_two_hosts(two_hosts: TwoHosts, launcher: str) -> None:
    assert_rank_zero_outlived(runner(two_hosts, launcher))


def test_tensorflow_multi_worker_fit_on_two_hosts(two_hosts: TwoHosts, tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    from tests.tensorflow.training import keras_mwms_train

    result = runner(two_hosts, "direct").run(keras_mwms_train, str(tmp_path), epochs=3)
    assert result["replicas"] == two_hosts.slots
    assert result["loss"][-1] < result["loss"][0] * 0.5, result["loss"]
    weights = [np.load(tmp_path / f"rank{r}.npz") for r in range(two_hosts.slots)]
    for other in weights[1:]:
        for name in weights[0].files:
            np.testing.assert_array_equal(other[name], weights[0][name])
