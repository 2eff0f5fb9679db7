"""Stand-in for spark-tensorflow-distributor's test conftest (copied next to its test file as conftest.py).

The original restarts a Docker standalone cluster per (workers, GPUs per worker, extra settings); this gives
the same fixtures on `local-cluster` with a fake GPU discovery script, so no cluster or GPU is needed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.compat.upstream_support import discovery_script
from tests.helpers import stop_forgetting

DRIVER_GPUS = 4


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--max_num_workers", action="store", default="2")


@pytest.fixture(scope="session")
def max_num_workers(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--max_num_workers"))


@pytest.fixture(scope="session")
def extra_spark_configs(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(getattr(request, "param", {}))


@pytest.fixture(scope="session")
def num_workers(request: pytest.FixtureRequest, max_num_workers: int) -> int:
    assert request.param <= max_num_workers
    return int(request.param)


@pytest.fixture(scope="session")
def num_gpus_per_worker(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture(scope="session", autouse=True)
def spark_session(
    num_workers: int, num_gpus_per_worker: int, extra_spark_configs: dict[str, Any]
) -> Iterator[Any]:
    """`num_workers` executors with `num_gpus_per_worker` fake GPUs each (and `spark.executor.cores` cores, as
    the original's workers have), the driver with four, each task taking a whole executor's GPUs unless
    `extra_spark_configs` says otherwise."""
    from pyspark.sql import SparkSession

    worker_script = discovery_script(tuple(str(i) for i in range(num_gpus_per_worker)))
    driver_script = discovery_script(tuple(str(i) for i in range(DRIVER_GPUS)))
    conf = {
        "spark.driver.resource.gpu.amount": str(DRIVER_GPUS),
        "spark.driver.resource.gpu.discoveryScript": driver_script,
        "spark.worker.resource.gpu.amount": str(num_gpus_per_worker),
        "spark.worker.resource.gpu.discoveryScript": worker_script,
        "spark.executor.resource.gpu.amount": str(num_gpus_per_worker),
        "spark.task.resource.gpu.amount": str(num_gpus_per_worker),
        "spark.executor.memory": "512m",
        "spark.ui.enabled": "false",
        "spark.ssl.enabled": "false",
        "tensorflow.spark.distributor.ignoreSsl": "false",
        **{k: str(v) for k, v in extra_spark_configs.items()},
    }
    cores = int(extra_spark_configs.get("spark.executor.cores", 1))  # each worker runs one executor this big
    builder = SparkSession.builder.master(f"local-cluster[{num_workers},{cores},1024]").appName("upstream-tf")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    stop_forgetting(session, conf)  # as the original's fresh cluster per case, nothing left for the next
    os.unlink(worker_script)
    os.unlink(driver_script)
