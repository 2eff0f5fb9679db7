"""Stand-ins for the helpers the originals' test files import from places this checkout lacks.

pyspark 4.3's wheel no longer exports ``pyspark.testing.utils.SPARK_HOME``, and the stored DeepSpeed test file
imports three helpers from a newer ``test_distributor.py`` than the one stored; these give the same Spark
setups (a fake three-GPU discovery script, the driver- and executor-GPU configurations), written here.
"""

from __future__ import annotations

import os
import stat
import tempfile

import pyspark

SPARK_HOME = os.path.dirname(pyspark.__file__)

FAKE_GPUS = ("0", "1", "2")


def discovery_script(addresses: tuple[str, ...] = FAKE_GPUS) -> str:
    """An executable script that reports `addresses` as the GPU resource (no GPU needed)."""
    quoted = ",".join(f'"{a}"' for a in addresses)
    handle, path = tempfile.mkstemp(prefix="sparkrunner-gpus-", suffix=".sh")
    with os.fdopen(handle, "w") as script:
        script.write(f'#!/bin/sh\necho \'{{"name": "gpu", "addresses": [{quoted}]}}\'\n')
    os.chmod(path, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return path


def set_up_test_dirs() -> tuple[str, str]:
    """(a GPU discovery script, an empty data folder), both for the caller to remove."""
    return discovery_script(), tempfile.mkdtemp(prefix="sparkrunner-data-")


def get_local_mode_conf() -> dict[str, str]:
    """The driver owns the three fake GPUs."""
    return {
        "spark.test.home": SPARK_HOME,
        "spark.driver.resource.gpu.amount": str(len(FAKE_GPUS)),
        "spark.executor.memory": "512m",
    }


def get_distributed_mode_conf() -> dict[str, str]:
    """Each worker owns the three fake GPUs; each task takes two cores and one GPU."""
    return {
        "spark.test.home": SPARK_HOME,
        "spark.worker.resource.gpu.amount": str(len(FAKE_GPUS)),
        "spark.task.cpus": "2",
        "spark.task.resource.gpu.amount": "1",
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.memory": "512m",
    }
