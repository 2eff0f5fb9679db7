"""Runner(np=N) right after the SparkSession starts waits for executors that register late, up to
start_timeout: a standalone cluster whose second worker starts 15 s after the run began."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from sparkrunner import Runner
from tests.conftest import stop_spark_session
from tests.scenarios.cluster.fixtures import session_on, skip_without_namespaces
from tests.scenarios.cluster.netns_cluster import NetnsCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LATE_S = 15.0


@pytest.fixture(scope="module")
def one_worker_of_two() -> Iterator[NetnsCluster]:
    """Two hosts with one slot each, of which only the first has its worker running."""
    skip_without_namespaces()
    cluster = NetnsCluster(hosts=2, slots_per_host=1, variant=1)
    try:
        cluster.start(workers=1)
        yield cluster
    finally:
        stop_spark_session(cluster.url)
        cluster.close()


def where() -> str:
    return os.environ["RANK"]


def test_a_run_waits_for_an_executor_that_starts_late(
    one_worker_of_two: NetnsCluster, caplog: pytest.LogCaptureFixture
) -> None:
    spark = session_on(one_worker_of_two)
    late = threading.Timer(LATE_S, one_worker_of_two.start_worker, args=(1,))
    late.start()
    try:
        assert Runner(np=2, spark=spark, launcher="direct", start_timeout=240, timeout=300).run(where) == "0"
    finally:
        late.cancel()
    out = caplog.text  # the sparkrunner logger's INFO lines
    assert "waiting for 2 task slots (" in out
    assert out.count("waiting for 2 task slots") <= 2  # one line per change in the count, not a stream
