"""The chaos soak: `--runs` runs (default 200) of np=2, each with a fault drawn at random, on local-cluster[2,1,1024]
and on the two-host fixture (network namespaces; there a host may also be cut off for a few seconds), both
launchers. Prints each cluster's outcome table (fault x launcher: runs, expected outcome met, max seconds) and
what was left: processes, temp folders, /dev/shm, ports, the driver's threads and RSS. The faults, their expected
outcomes and the checks are tests/scenarios/faults/{chaos,leftovers,soak}.py, which CI's test_soak.py runs too.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.soak --runs 40 [--seed 1] [--only local|two-hosts]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

from bench.spark_session import quiet_session
from tests.helpers import TEST_SESSION_ENV
from tests.matrix import RUNNABLE_LAUNCHERS
from tests.scenarios.cluster.netns_cluster import NetnsCluster, can_create_namespaces
from tests.scenarios.faults.leftovers import use_private_temp_dir
from tests.scenarios.faults.soak import SOAK_FAULTS, TWO_HOST_FAULTS, Soak

SESSION_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.executor.memory": "768m",
    "spark.ui.enabled": "false",
}


def soak_on(spark: object, runs: int, seed: int, faults: tuple[str, ...], cluster: object = None) -> Soak:
    """One warm-up run (its pools belong to the baseline), then the soak."""
    soak = Soak(spark, runs, seed, faults, RUNNABLE_LAUNCHERS, cluster)
    soak.one("none", "direct", -1)
    soak.table.clear()
    soak.leftovers.clear()
    soak.run()
    return soak


def local_cluster(runs: int, seed: int) -> Soak:
    spark = quiet_session("local-cluster[2,1,1024]", **SESSION_CONF)
    try:
        return soak_on(spark, runs, seed, SOAK_FAULTS)
    finally:
        spark.stop()


def two_hosts(runs: int, seed: int) -> Soak | None:
    why = can_create_namespaces()
    if why is not None:
        print(f"two-host soak skipped: {why}")
        return None
    cluster = NetnsCluster(hosts=2, slots_per_host=2, variant=7)
    try:
        cluster.start()
        host = {"spark.driver.host": cluster.master_host, "spark.driver.bindAddress": cluster.master_host}
        spark = quiet_session(cluster.url, **{**SESSION_CONF, **host})
        try:
            return soak_on(spark, runs, seed, TWO_HOST_FAULTS, cluster)
        finally:
            spark.stop()
    finally:
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=["local", "two-hosts"])
    args = parser.parse_args()
    # the scans below see this process's runs only: a temp dir of its own (the executors inherit it), its tag
    os.environ.setdefault(TEST_SESSION_ENV, uuid.uuid4().hex)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    use_private_temp_dir(Path(tempfile.mkdtemp(prefix="soak-")))
    passed = True
    if args.only in (None, "local"):
        soak = local_cluster(args.runs, args.seed)
        print(soak.report(f"local-cluster[2,1,1024]: {args.runs} runs, seed {args.seed}"), flush=True)
        passed &= soak.passed
    if args.only in (None, "two-hosts"):
        hosts = two_hosts(args.runs, args.seed)
        if hosts is not None:
            print(
                hosts.report(f"two hosts (netns, 2 x 2 slots): {args.runs} runs, seed {args.seed}"),
                flush=True,
            )
            passed &= hosts.passed
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
