"""Shared or refused, on two real hosts that share no /tmp: a Spark standalone cluster whose workers each run
in a network namespace and a mount namespace of their own, with a private tmpfs on /tmp. The driver (root
namespaces) materializes under its /tmp: the hosts cannot see it, and that must fail loudly with the URI to
use; an S3-API server on the cluster's network is shared by every host, and works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs
import pytest

from sparkrunner import Runner
from sparkrunner.data import NumpyLoader, ParquetData, materialize
from sparkrunner.errors import DataNotSharedError, RankFailedError
from tests.conftest import spark_session, stop_spark_session
from tests.data.s3_server import S3Server, s3_server
from tests.scenarios.cluster.netns_cluster import NetnsCluster, can_create_namespaces
from tests.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

_why_not = can_create_namespaces()
if _why_not is not None:
    pytest.skip(f"multi-host test skipped: {_why_not}", allow_module_level=True)

ROWS = 240
EXECUTOR_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def private_tmp_hosts() -> Iterator[tuple[Any, S3Server]]:
    """Two hosts with private /tmp, a session on them, and an S3 server on the cluster's bridge address."""
    cluster = NetnsCluster(hosts=2, slots_per_host=1, variant=3, private_tmp=True)
    try:
        url = cluster.start()
        with s3_server(cluster.master_host) as s3:
            driver = {
                "spark.driver.host": cluster.master_host,
                "spark.driver.bindAddress": cluster.master_host,
            }
            spark = spark_session(url, **driver)
            _wait_for_executors(spark, 2, cluster)
            yield spark, s3
    finally:
        stop_spark_session(
            cluster.url
        )  # before the workers go, so no executor is left waiting for its driver
        cluster.close()


def _wait_for_executors(spark: Any, count: int, cluster: NetnsCluster) -> None:
    """Fail (instead of a job waiting forever) when the hosts' executors do not come up."""
    registered = spark.sparkContext._jsc.sc().getExecutorMemoryStatus  # one entry per executor + the driver
    wait_until(
        lambda: registered().size() >= count + 1,
        EXECUTOR_TIMEOUT_S,
        f"{count} executors registering with the driver (see {cluster.logs})",
    )


def frame(spark: Any) -> Any:
    return spark.range(0, ROWS, numPartitions=4).selectExpr("id", "CAST(id % 5 AS DOUBLE) AS x")


def test_a_cache_on_the_drivers_own_disk_is_refused(
    private_tmp_hosts: tuple[Any, S3Server], tmp_path: Path
) -> None:
    spark, _ = private_tmp_hosts
    with pytest.raises(DataNotSharedError, match=r"cannot see .*cache_dir='s3://bucket/prefix'"):
        materialize(frame(spark), tmp_path / "cache", progress=False)
    assert not list((tmp_path / "cache").glob("*/_sparkrunner_manifest.json")), "no entry may look complete"


def test_an_object_store_cache_is_shared_and_a_local_copy_is_refused(
    private_tmp_hosts: tuple[Any, S3Server], tmp_path: Path
) -> None:
    spark, s3 = private_tmp_hosts
    data = materialize(frame(spark), s3.new_prefix(), storage_options=s3.storage_options, progress=False)
    ids = np.concatenate([b["id"] for b in NumpyLoader(data, ROWS, rank=0, world_size=1, shuffle=False)])
    np.testing.assert_array_equal(np.sort(ids), np.arange(ROWS))

    # the same entry on the driver's /tmp (as a cache filled in an earlier local session): a cache hit there
    # must be refused, because the hosts' tasks see none of its rows
    key = data.uri.rsplit("/", 1)[1]
    (tmp_path / key).mkdir()
    pafs.copy_files(data.uri.removeprefix("s3://"), str(tmp_path / key), source_filesystem=s3.filesystem())
    with pytest.raises(
        DataNotSharedError, match=rf"holds {ROWS} rows as the driver sees it, but srhost\S+ sees 0 rows"
    ):
        materialize(frame(spark), tmp_path, progress=False)


def count_rows(data: ParquetData) -> int:
    """A rank's whole read of its shard (the rank's host must see the files)."""
    from sparkrunner.data import NumpyLoader

    return sum(len(batch["id"]) for batch in NumpyLoader(data, 8))


def test_ranks_refuse_a_dataset_their_host_cannot_see(
    private_tmp_hosts: tuple[Any, S3Server], tmp_path: Path
) -> None:
    spark, s3 = private_tmp_hosts
    shared = materialize(frame(spark), s3.new_prefix(), storage_options=s3.storage_options, progress=False)
    runner = Runner(np=2, spark=spark, launcher="direct", start_timeout=120, timeout=300)
    assert runner.run(count_rows, shared) == ROWS // 2

    (tmp_path / "copy").mkdir()
    pafs.copy_files(
        shared.uri.removeprefix("s3://"), str(tmp_path / "copy"), source_filesystem=s3.filesystem()
    )
    on_driver_only = materialize(tmp_path / "copy")  # a path: read here, never checked by a Spark job
    with pytest.raises(
        RankFailedError, match=r"DataNotSharedError: rank \d on srhost\S+ cannot read 4 of the 4"
    ):
        runner.run(count_rows, on_driver_only)
