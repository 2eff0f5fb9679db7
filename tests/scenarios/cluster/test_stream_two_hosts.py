"""`stream(df)` across two hosts (the multi-host fixture: 2 hosts x 2 task slots), with each launcher: np=2
barrier tasks leave 2 slots for the feeder tasks, so some rank reads rows computed on the other host. Against
an oracle that collects the DataFrame itself: every row exactly once, the same steps on every rank, each row's
feature as Spark computes it, every row computed on one of the hosts, and no file written on the driver, in the
executors' local and temporary folders, or in the ranks' temporary folder."""

from __future__ import annotations

import contextlib
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sparkrunner import Runner
from sparkrunner.data import NumpyLoader, stream
from tests.helpers import file_stats
from tests.matrix import LAUNCHERS
from tests.scenarios.cluster.fixtures import TwoHosts, registered, session_on
from tests.scenarios.cluster.netns_cluster import NetnsCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NP, ROWS, PARTITIONS, BATCH = 2, 400, 4, 25  # 400 = 2 ranks x 8 steps x 25: every row each epoch


def host_code(hostname: str) -> float:
    """A host's name as a number a float32 column holds exactly (below 2**24)."""
    return float(zlib.crc32(hostname.encode()) % 65521)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Where the driver, the executors' Python workers and the ranks may write temporary files."""
    root = tmp_path_factory.mktemp("stream-two-hosts")
    # no folder is named "spark_local": tests/conftest.py reads that string in a fixture as the `spark_local`
    # session it fetches, which would put this module in a group of its own, away from the hosts' cluster
    made = {name: root / name for name in ("driver_local", "executor_tmp", "rank_tmp")}
    for folder in made.values():
        folder.mkdir()
    return made


@pytest.fixture(scope="module")
def hosts(netns_cluster: NetnsCluster, folders: dict[str, Path]) -> TwoHosts:
    """A session on the two hosts whose driver and executor Python workers write temporary files in `folders`."""
    spark = session_on(
        netns_cluster,
        **{
            "spark.local.dir": str(folders["driver_local"]),
            "spark.executorEnv.TMPDIR": str(folders["executor_tmp"]),
            "spark.sql.execution.arrow.maxRecordsPerBatch": "20",  # several batches per partition
        },
    )
    return registered(netns_cluster, spark, NP + 2)


def executor_local_dirs(hosts: TwoHosts) -> dict[str, Path]:
    """The local folders (block manager, spills) the standalone workers gave this application's executors,
    read from the executor JVMs' environment (SPARK_EXECUTOR_DIRS) in each host's namespace."""
    app = hosts.spark.sparkContext.applicationId
    found: dict[str, Path] = {}
    for ns in hosts.cluster.namespaces:
        for pid in hosts.cluster.pids_in(ns):
            with contextlib.suppress(OSError):
                if app.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                environ = dict(
                    item.split("=", 1)
                    for item in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
                    if "=" in item
                )
                for number, folder in enumerate(environ.get("SPARK_EXECUTOR_DIRS", "").split(":")):
                    if folder:
                        found[f"{ns}-{pid}-{number}"] = Path(folder)
    return found


def frame(spark: Any) -> Any:
    """ids, a pandas-UDF feature, and the code of the host whose feeder task computed the row."""
    from pyspark.sql import functions as F

    @F.pandas_udf("double")  # type: ignore[call-overload]
    def third(ids: pd.Series) -> pd.Series:
        return ids / 3.0

    @F.pandas_udf("double")  # type: ignore[call-overload]
    def computed_on(ids: pd.Series) -> pd.Series:
        import socket

        return pd.Series([host_code(socket.gethostname())] * len(ids))

    return spark.range(0, ROWS, numPartitions=PARTITIONS).select(
        "id", third("id").alias("w"), computed_on("id").alias("host")
    )


def read_one_epoch(data: Any) -> dict[str, Any]:
    """On a rank: its host, its step count, and every batch's rows."""
    import socket

    batches = list(NumpyLoader(data, BATCH))
    return {
        "hostname": socket.gethostname(),
        "steps": len(batches),
        "sizes": [len(b["id"]) for b in batches],
        **{name: np.concatenate([b[name] for b in batches]).tolist() for name in ("id", "w", "host")},
    }


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_ranks_on_two_hosts_read_every_row_once_in_equal_steps_writing_nothing(
    hosts: TwoHosts, folders: dict[str, Path], launcher: str
) -> None:
    df = frame(hosts.spark)
    oracle = {row["id"]: row["w"] for row in df.select("id", "w").collect()}
    data = stream(df, seed=3)
    watched = {**folders, **executor_local_dirs(hosts)}
    assert len(watched) > len(folders), "no executor local folder found to watch"
    before = file_stats(watched)
    ranks = Runner(
        np=NP, spark=hosts.spark, launcher=launcher, env={"TMPDIR": str(folders["rank_tmp"])},
        start_timeout=180, timeout=300,
    ).run_all(read_one_epoch, data)  # fmt: skip
    written = {path: stat for path, stat in file_stats(watched).items() if before.get(path) != stat}
    assert written == {}, f"streaming wrote files: {sorted(written)}"

    assert [r["steps"] for r in ranks] == [ROWS // (NP * BATCH)] * NP
    assert all(r["sizes"] == [BATCH] * r["steps"] for r in ranks)
    ids = [i for r in ranks for i in r["id"]]
    assert sorted(ids) == sorted(oracle), "not every row exactly once"
    assert [w for r in ranks for w in r["w"]] == [np.float32(oracle[i]) for i in ids]
    codes = {host_code(name): name for name in hosts.cluster.hostnames}
    computed_on = {codes.get(code, f"not a host: {code}") for r in ranks for code in r["host"]}
    assert computed_on <= set(hosts.cluster.hostnames), f"rows computed off the hosts: {computed_on}"
    assert computed_on | {r["hostname"] for r in ranks} == set(hosts.cluster.hostnames)
