"""Shared or refused, on two real hosts that share no /tmp: a Spark standalone cluster whose workers each run
in a network namespace and a mount namespace of their own, with a private tmpfs on /tmp. The driver (root
namespaces) materializes under its /tmp: the hosts cannot see it, and that must fail loudly with the URI to
use; an S3-API server on the cluster's network is shared by every host, and works. A checkpoint_dir under the
driver's /tmp is refused when the ranks start, and never retried.

The module's first test starts these hosts' session with only the first host's worker running: a run started
right after waits for the executor of the second host, whose worker starts 15 s later."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs
import pytest

from sparkrunner import Runner
from sparkrunner.data import NumpyLoader, ParquetData, materialize
from sparkrunner.errors import DataNotSharedError, RankFailedError
from tests.conftest import stop_spark_session
from tests.data.s3_server import S3Server, s3_server
from tests.helpers import leftover_rank_processes
from tests.scenarios.cluster.fixtures import TwoHosts, registered, session_on, skip_without_namespaces
from tests.scenarios.cluster.netns_cluster import NetnsCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 240


LATE_S = 15.0


@pytest.fixture(scope="module")
def one_worker_of_two() -> Iterator[tuple[NetnsCluster, S3Server]]:
    """2 hosts x 1 slot with a private /tmp each, of which only the first has its worker running, and an S3
    server on the cluster's bridge address; removed even on failure (the session first, so no executor waits
    for its driver)."""
    skip_without_namespaces()
    cluster = NetnsCluster(hosts=2, slots_per_host=1, variant=3, private_tmp=True)
    try:
        cluster.start(workers=1)
        with s3_server(cluster.master_host) as s3:
            yield cluster, s3
    finally:
        stop_spark_session(cluster.url)
        cluster.close()


@pytest.fixture(scope="module")
def private_tmp_hosts(one_worker_of_two: tuple[NetnsCluster, S3Server]) -> tuple[TwoHosts, S3Server]:
    """Both hosts' workers running (the second's started here unless the late-executor test did), and a session
    on them with both executors registered."""
    cluster, s3 = one_worker_of_two
    for host in sorted(set(range(len(cluster.namespaces))) - cluster.started_workers):
        cluster.start_worker(host)
    return registered(cluster, session_on(cluster), slots=2), s3


def where() -> str:
    return os.environ["RANK"]


def test_a_run_waits_for_an_executor_that_starts_late(
    one_worker_of_two: tuple[NetnsCluster, S3Server], caplog: pytest.LogCaptureFixture
) -> None:
    """Runner(np=N) right after the SparkSession starts waits, up to start_timeout, for executors that register
    late: the second host's worker starts 15 s after the run began."""
    cluster, _ = one_worker_of_two
    assert cluster.started_workers == {0}, "the first test on these hosts: only the first worker runs"
    spark = session_on(cluster)
    late = threading.Timer(LATE_S, cluster.start_worker, args=(1,))
    late.start()
    try:
        assert Runner(np=2, spark=spark, launcher="direct", start_timeout=240, timeout=300).run(where) == "0"
    finally:
        late.cancel()
    out = caplog.text  # the sparkrunner logger's INFO lines
    assert "waiting for 2 task slots (" in out
    assert out.count("waiting for 2 task slots") <= 2  # one line per change in the count, not a stream


def frame(spark: Any) -> Any:
    return spark.range(0, ROWS, numPartitions=4).selectExpr("id", "CAST(id % 5 AS DOUBLE) AS x")


def test_a_cache_on_the_drivers_own_disk_is_refused(
    private_tmp_hosts: tuple[TwoHosts, S3Server], tmp_path: Path
) -> None:
    spark = private_tmp_hosts[0].spark
    with pytest.raises(DataNotSharedError, match=r"cannot see .*cache_dir='s3://bucket/prefix'"):
        materialize(frame(spark), tmp_path / "cache", progress=False)
    assert not list((tmp_path / "cache").glob("*/_sparkrunner_manifest.json")), "no entry may look complete"


def test_an_object_store_cache_is_shared_and_a_local_copy_is_refused(
    private_tmp_hosts: tuple[TwoHosts, S3Server], tmp_path: Path
) -> None:
    hosts, s3 = private_tmp_hosts
    spark = hosts.spark
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
    private_tmp_hosts: tuple[TwoHosts, S3Server], tmp_path: Path
) -> None:
    hosts, s3 = private_tmp_hosts
    spark = hosts.spark
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


def never_reached() -> None:
    raise AssertionError("the training function must not start with a checkpoint_dir the ranks cannot see")


def test_a_checkpoint_dir_private_to_each_host_is_refused_at_start(
    private_tmp_hosts: tuple[TwoHosts, S3Server], tmp_path: Path
) -> None:
    """Placement: Spark barrier stage (np=2, one task per host), launcher direct, max_failures=2."""
    hosts, _ = private_tmp_hosts
    folder = tmp_path / "checkpoints"  # under the driver's /tmp: no host sees it
    runner = Runner(
        np=2,
        spark=hosts.spark,
        launcher="direct",
        max_failures=2,
        checkpoint_dir=str(folder),
        start_timeout=180,
        timeout=300,
        tracking=False,
        progress=False,
    )
    with pytest.raises(RankFailedError) as info:
        runner.run(never_reached)
    error = info.value
    assert error.exc_type.endswith("CheckpointDirError"), error
    assert f"checkpoint_dir={str(folder)!r} is not shared" in str(error)
    assert any(host in str(error) for host in hosts.cluster.hostnames), str(error)
    assert runner.last_run is not None and len(runner.last_run.attempts) == 1, "another attempt cannot fix it"
    assert [p.name for p in folder.iterdir()] == [], "the driver's probe is removed"
    assert leftover_rank_processes(grace_s=5.0) == {}
