"""A data-path read across two hosts (the multi-host fixture: 2 hosts x 2 task slots): a DataFrame materialized
to an S3-API server on the hosts' bridge, read by 4 ranks, 2 on each host, with each launcher. The shards must be
disjoint, cover every row, and give every rank the same steps; the oracle is the source rows, built here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from sparkrunner import Runner
from sparkrunner.data import ParquetData, materialize
from tests.data.s3_server import s3_server
from tests.matrix import LAUNCHERS
from tests.scenarios.cluster.fixtures import TwoHosts

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BATCH = 20
ROWS = 480  # 4 ranks x 6 steps x 20 rows: "drop" leaves nothing out, so every row must be read once


@pytest.fixture(scope="module")
def on_the_bridge(two_hosts: TwoHosts) -> Iterator[ParquetData]:
    """The source rows materialized by the hosts' executors to an S3 server every host reaches."""
    with s3_server(two_hosts.cluster.master_host) as s3:
        frame = two_hosts.spark.range(0, ROWS, numPartitions=4).selectExpr(
            "id", "CAST(id * 3 AS DOUBLE) AS x"
        )
        yield materialize(frame, s3.new_prefix(), storage_options=s3.storage_options, progress=False)


def read_shard(data: ParquetData) -> list[dict[str, Any]]:
    """Each rank reads its shard (seeded shuffle), then every rank's host, step count and rows reach rank 0."""
    import socket

    import torch.distributed as dist

    from sparkrunner.data import NumpyLoader

    batches = list(NumpyLoader(data, BATCH, shuffle=True, seed=7))
    mine = {
        "hostname": socket.gethostname(),
        "steps": len(batches),
        "sizes": [len(batch["id"]) for batch in batches],
        "id": np.concatenate([batch["id"] for batch in batches]).tolist(),
        "x": np.concatenate([batch["x"] for batch in batches]).tolist(),
    }
    dist.init_process_group("gloo")
    views: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(views, mine)
    dist.destroy_process_group()
    return views


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_four_ranks_on_two_hosts_read_disjoint_complete_equal_shards(
    two_hosts: TwoHosts, on_the_bridge: ParquetData, launcher: str
) -> None:
    assert on_the_bridge.uri.startswith("s3://")
    runner = Runner(
        np=two_hosts.slots, spark=two_hosts.spark, launcher=launcher, start_timeout=180, timeout=300
    )
    views = runner.run(read_shard, on_the_bridge)

    assert sorted(view["hostname"] for view in views) == sorted(two_hosts.cluster.hostnames * 2)
    assert [view["steps"] for view in views] == [ROWS // (BATCH * two_hosts.slots)] * two_hosts.slots
    assert all(view["sizes"] == [BATCH] * view["steps"] for view in views)
    ids = [np.array(view["id"]) for view in views]
    for index, shard in enumerate(ids):
        assert len(np.unique(shard)) == len(shard), f"rank {index} read a row twice"
        for other in ids[index + 1 :]:
            assert not np.intersect1d(shard, other).size, "two ranks read the same row"
    everything = np.concatenate(ids)
    np.testing.assert_array_equal(np.sort(everything), np.arange(ROWS))
    np.testing.assert_array_equal(np.concatenate([view["x"] for view in views]), everything * 3.0)
