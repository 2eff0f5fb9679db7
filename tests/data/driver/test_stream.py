"""`stream(df)` on local-cluster[2,2] (4 slots: 2 for the barrier tasks, 2 for feeders), against an oracle that
collects the DataFrame itself: every row once per epoch, equal steps, the same order again, no file written,
a killed feeder retried without duplicates, a failed one stopping the run, the no-free-slot refusal, and the
rows going from the feeders to the ranks without crossing the driver."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sparkrunner import Runner
from sparkrunner.data import NumpyLoader, close_stream, stream
from sparkrunner.errors import NotEnoughSlotsError, RankFailedError, StreamFeedError
from tests.conftest import spark_session
from tests.helpers import file_stats
from tests.matrix import Placement
from tests.waiting import wait_until

pytestmark = pytest.mark.spark

MASTER = "local-cluster[2,2,1024]"
ROWS, PARTITIONS, BATCH = 600, 6, 25  # 600 = 2 ranks x 12 steps x 25: no remainder, every row each epoch


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Where Spark (driver and executors) and the ranks may write: the test scans them for new files."""
    root = tmp_path_factory.mktemp("stream")
    return {name: (root / name) for name in ("spark_local", "executor_tmp", "rank_tmp")}


@pytest.fixture(scope="module")
def spark(folders: dict[str, Path]) -> Any:
    for folder in folders.values():
        folder.mkdir(exist_ok=True)
    return spark_session(
        MASTER,
        **{
            "spark.local.dir": str(folders["spark_local"]),
            "spark.executorEnv.TMPDIR": str(folders["executor_tmp"]),
            "spark.sql.execution.arrow.maxRecordsPerBatch": "20",  # several batches per partition
        },
    )


@pytest.fixture(scope="module", params=["np<0", "spark"])
def where(request: pytest.FixtureRequest, spark: Any) -> Placement:
    return Placement(request.param, spark if request.param == "spark" else None)


def frame(spark: Any) -> Any:
    """ids with a pandas-UDF feature (preprocessing that runs in the feeder tasks)."""
    from pyspark.sql import functions as F

    @F.pandas_udf("double")  # type: ignore[call-overload]
    def half(ids: pd.Series) -> pd.Series:
        return ids * 0.5

    return spark.range(0, ROWS, numPartitions=PARTITIONS).select("id", half("id").alias("w"))


def read_epochs(data: Any) -> dict[str, Any]:
    """On a rank: epoch 0 twice and epoch 1, each as (ids, w, batch sizes), with the loader's step count. The
    second pass comes from a new loader (its pass 0 again, while the first pass's job may still be ending)."""
    first, second = NumpyLoader(data, BATCH), NumpyLoader(data, BATCH)
    passes = []
    for loader, epoch in ((first, 0), (second, 0), (second, 1)):
        loader.set_epoch(epoch)
        batches = list(loader)
        passes.append(
            (
                np.concatenate([b["id"] for b in batches]),
                np.concatenate([b["w"] for b in batches]),
                [len(b["id"]) for b in batches],
            )
        )
    return {"steps": len(first), "passes": passes}


def test_every_row_once_equal_steps_same_order_no_file(
    spark: Any, where: Placement, folders: dict[str, Path]
) -> None:
    """Launcher direct on both placements, which differ in where the ranks read from: processes on the driver,
    or barrier tasks beside the feeder tasks on the executors. A rank reads the stream the same way whichever
    launcher started it (the launchers differ in starting ranks: tests/launch, tests/scenarios/faults)."""
    df = frame(spark)
    oracle = {row["id"]: row["w"] for row in df.collect()}
    data = stream(df, seed=7)
    before = file_stats(folders)
    ranks = Runner(
        np=where.np(2), launcher="direct", spark=where.spark, env={"TMPDIR": str(folders["rank_tmp"])}
    ).run_all(read_epochs, data)
    written = {path: stat for path, stat in file_stats(folders).items() if before.get(path) != stat}
    assert written == {}, f"streaming wrote files: {sorted(written)}"
    assert [r["steps"] for r in ranks] == [ROWS // (2 * BATCH)] * 2
    for epoch in range(3):
        ids = np.concatenate([r["passes"][epoch][0] for r in ranks])
        weights = np.concatenate([r["passes"][epoch][1] for r in ranks])
        assert sorted(ids.tolist()) == sorted(oracle), f"pass {epoch}: not every row exactly once"
        assert weights.tolist() == [np.float32(oracle[i]) for i in ids.tolist()]
        assert all(r["passes"][epoch][2] == [BATCH] * r["steps"] for r in ranks)
    for r in ranks:
        assert r["passes"][0][0].tolist() == r["passes"][1][0].tolist(), "set_epoch(0) twice: another order"
        assert r["passes"][0][0].tolist() != r["passes"][2][0].tolist(), "epoch 1 kept epoch 0's order"


WIDE = 1000  # floats per row of the wide frame: 2,000 rows x 4 KB = 8 MB for the ranks to read


def wide_sums(data: Any) -> tuple[list[int], float]:
    """On a rank: the ids it read and the sum of every float of its rows."""
    ids, total = [], 0.0
    for batch in NumpyLoader(data, BATCH):
        ids += batch["id"].tolist()
        total += float(batch["x"].astype(np.float64).sum())
    return ids, total


def test_the_rows_go_from_the_feeders_to_the_ranks_not_through_the_driver(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every encrypted record the driver process (the broker's) seals or opens is counted at the channel's
    cipher, below any message: for an 8 MB frame, far less than the frame crosses the driver's connections.
    Ranks are processes (np<0, launcher direct), so their own records are not counted."""
    from pyspark.sql import functions as F

    from sparkrunner.channel import transport

    crossed = [0]
    seal, open_ = transport._RecordCipher.seal, transport._RecordCipher.open

    def counted_seal(cipher: Any, chunk: Any, last: bool) -> bytes:
        crossed[0] += len(chunk)
        return seal(cipher, chunk, last)

    def counted_open(cipher: Any, header: bytes, sealed: bytearray) -> bytes:
        crossed[0] += len(sealed)
        return open_(cipher, header, sealed)

    df = spark.range(0, 2000, numPartitions=4).select(
        "id", F.array_repeat(F.col("id").cast("float"), WIDE).alias("x")
    )
    data = stream(df)
    monkeypatch.setattr(transport._RecordCipher, "seal", counted_seal)
    monkeypatch.setattr(transport._RecordCipher, "open", counted_open)
    ranks = Runner(np=-2, launcher="direct").run_all(wide_sums, data)
    assert sorted(ranks[0][0] + ranks[1][0]) == list(range(2000)), "not every row once"
    assert ranks[0][1] + ranks[1][1] == WIDE * sum(range(2000))
    streamed = 2000 * WIDE * 4
    assert 0 < crossed[0] < streamed // 10, (
        f"{crossed[0]:,} bytes crossed the driver for {streamed:,} streamed"
    )


def failing_once_armed(armed: Path) -> Any:
    """A mapInArrow step that raises in partition 2 once `armed` exists (after `stream` counted the rows)."""

    def step(batches: Any) -> Any:
        from pyspark import TaskContext

        doomed = TaskContext.get().partitionId() == 2 and armed.exists()
        for number, batch in enumerate(batches):
            if doomed and number == 2:
                raise ValueError("bad row in partition 2")
            yield batch

    return step


def kill_python_workers() -> int:
    """SIGKILL the Python workers of this test's Spark executors (children of a pyspark.daemon): feeders die."""
    import psutil

    killed = 0
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            parent = process.parent()
            if parent is not None and "pyspark.daemon" in " ".join(parent.cmdline()):
                process.kill()
                killed += 1
    return killed


def test_a_feeder_killed_mid_epoch_gives_every_row_once(spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Driver threads as the two ranks (np<0 without a launcher). With a 1-byte buffer every feeder is held
    mid-partition while the ranks wait after their first batch; then every feeder is killed and Spark retries."""
    df = spark.range(0, 2000, numPartitions=4)
    data = stream(df, shuffle=False, buffer_bytes=1)
    read: dict[int, list[int]] = {}
    first = [threading.Event(), threading.Event()]
    killed = threading.Event()

    def rank(number: int) -> None:
        ids = []
        for batch in NumpyLoader(data, 50, rank=number, world_size=2):
            ids += [int(i) for i in batch["id"]]
            first[number].set()
            killed.wait()
        read[number] = ids

    with caplog.at_level(logging.DEBUG, logger="sparkrunner.data.ranks.stream_inbox"):
        threads = [threading.Thread(target=rank, args=(number,)) for number in range(2)]
        for thread in threads:
            thread.start()
        for event in first:
            event.wait()
        assert kill_python_workers() > 0
        killed.set()
        for thread in threads:
            thread.join()
    assert sorted(read[0] + read[1]) == [row["id"] for row in df.collect()]
    assert any("already held" in record.getMessage() for record in caplog.records), (
        "no retry was deduplicated"
    )


def test_a_feeder_failing_for_good_stops_the_ranks_naming_partition_and_reason(
    spark: Any, tmp_path: Path
) -> None:
    df = frame(spark)
    armed = tmp_path / "armed"
    data = stream(df.mapInArrow(failing_once_armed(armed), df.schema))
    armed.touch()
    with pytest.raises(
        RankFailedError, match=r"(?s)the feeder task of partition 2 failed.*bad row in partition 2"
    ):
        Runner(np=-2, launcher="direct").run(read_epochs, data)


def changing_once_armed(armed: Path, change: str) -> Any:
    """A mapInArrow step whose partition 1 gives 5 rows fewer, or 5 more, once `armed` exists (after `stream`
    counted the rows): a DataFrame that is not the same on every pass."""

    def step(batches: Any) -> Any:
        from pyspark import TaskContext

        changed = TaskContext.get().partitionId() == 1 and armed.exists()
        for number, batch in enumerate(batches):
            if changed and number == 0:
                batch = batch.slice(5) if change == "fewer" else pa_concat(batch, batch.slice(0, 5))
            yield batch

    return step


def pa_concat(*batches: Any) -> Any:
    import pyarrow as pa

    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


@pytest.mark.parametrize("change", ["fewer", "more"])
def test_a_partition_that_gives_other_rows_than_counted_fails_the_pass_np_below_zero_direct(
    spark: Any, tmp_path: Path, change: str
) -> None:
    """Fewer rows leave a rank waiting for them; more rows would reach no rank. Either way every rank hears
    why, even a rank whose own share came whole (the ranks wait for the broker's verdict on the pass)."""
    df = frame(spark)
    armed = tmp_path / "armed"
    data = stream(df.mapInArrow(changing_once_armed(armed, change), df.schema), shuffle=False)
    armed.touch()
    gave = {"fewer": 95, "more": 105}[change]
    with pytest.raises(
        RankFailedError,
        match=rf"partition 1 of the streamed DataFrame gave {gave} rows in epoch 0 where `stream` counted 100",
    ):
        Runner(np=-2, launcher="direct").run(read_epochs, data)


def read_in_threads(data: Any, batch: int) -> list[list[int]]:
    """The ids two ranks read, as threads of this driver (np<0 without a launcher)."""
    read: list[list[int]] = [[], []]

    def rank(number: int) -> None:
        for piece in NumpyLoader(data, batch, rank=number, world_size=2):
            read[number] += [int(i) for i in piece["id"]]

    threads = [threading.Thread(target=rank, args=(number,)) for number in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return read


def raising_udf(column: Any) -> Any:
    from pyspark.sql import functions as F

    @F.pandas_udf("double")  # type: ignore[call-overload]
    def computed(ids: pd.Series) -> pd.Series:
        raise RuntimeError("the feature was computed")

    return computed(column)


def test_a_plan_without_exchange_is_counted_without_its_columns_and_a_shuffled_one_with_them(
    spark: Any,
) -> None:
    """`stream` counts a narrow plan over no column (no UDF runs before the first pass: the UDF that raises
    surfaces only in the feeders), and a plan with a shuffle over every column (the UDF runs in `stream`)."""
    from pyspark.sql import functions as F

    narrow = spark.range(0, 600, numPartitions=6).select("id", raising_udf(F.col("id")).alias("w"))
    data = stream(narrow)
    assert data.partition_rows == (100,) * 6
    with pytest.raises(
        StreamFeedError, match=r"the feeder task of partition \d( or \d)* failed .*the feature was computed"
    ):
        NumpyLoader(data, BATCH, rank=0, world_size=1).__iter__().__next__()
    shuffled = spark.range(0, 600, numPartitions=6).repartition(4, "id")
    with pytest.raises(Exception, match="the feature was computed"):
        stream(shuffled.select("id", raising_udf(F.col("id")).alias("w")))


ADAPTIVE = {  # coalesce a shuffle's partitions by their bytes, at a size that a few KB of rows cross
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.shuffle.partitions": "40",
    "spark.sql.adaptive.coalescePartitions.parallelismFirst": "false",
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": "16k",
    "spark.sql.adaptive.coalescePartitions.minPartitionSize": "1k",
}


@contextlib.contextmanager
def session_conf(spark: Any, settings: dict[str, str]) -> Any:
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


def test_a_shuffled_plan_coalesced_by_adaptive_execution_gives_every_row_once(spark: Any) -> None:
    """Adaptive execution coalesces the shuffle's partitions by their bytes, so a count over fewer columns
    would see other partitions than the feeders: the wide column crosses the shuffle (np<0, two rank threads)."""
    from pyspark.sql import functions as F

    wide = F.array(*[(F.col("id") * i).cast("float") for i in range(16)])
    df = spark.range(0, 3000, numPartitions=6).select("id", wide.alias("f")).repartition("id")
    with session_conf(spark, ADAPTIVE):
        data = stream(df, seed=3)
        assert 1 < len(data.partition_rows) < 40, f"not coalesced to a few partitions: {data.partition_rows}"
        read = read_in_threads(data, 10)
        oracle = sorted(row["id"] for row in df.collect())
    assert sorted(read[0] + read[1]) == oracle
    assert len(read[0]) == len(read[1])


def test_closing_a_stream_cancels_feeders_that_a_reader_still_holds(spark: Any) -> None:
    """np<0: a loader in this process stops after its first batch (its buffer full, its connections open, so
    the feeders wait for its acks); `close_stream` ends the feeders' job (Spark's own status tracker says so),
    and the loader gets an error instead of waiting."""
    tracker = spark.sparkContext.statusTracker()
    data = stream(spark.range(0, 20_000, numPartitions=4), shuffle=False, buffer_bytes=1)
    batches = iter(NumpyLoader(data, 50, rank=0, world_size=1))
    next(batches)
    wait_until(tracker.getActiveJobsIds, 30, "the feeders' job to run")
    close_stream(data)
    wait_until(lambda: not tracker.getActiveJobsIds(), 30, "the feeders' job to be cancelled")
    with pytest.raises(StreamFeedError):
        for _ in batches:
            pass


def test_no_free_slot_for_feeders_is_refused_before_any_rank_starts(spark: Any) -> None:
    data = stream(frame(spark))
    with pytest.raises(
        NotEnoughSlotsError, match=r"feeder tasks beside the 4 barrier tasks.*spark\.task\.cpus"
    ):
        Runner(np=4, launcher="direct", spark=spark).run(read_epochs, data)


def listens_while_reading(data: Any) -> list[int]:
    """On a rank: the ports this process listens on (read from /proc here) once its first batch came."""
    import os

    from tests.helpers import listening_sockets

    batches = iter(NumpyLoader(data, BATCH))
    next(batches)
    ports = sorted(port for _, port in listening_sockets(os.getpid()))
    for _ in batches:
        pass
    return ports


def test_the_streams_servers_take_their_ports_from_the_port_ranges(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker (driver) from SPARKRUNNER_PORT_RANGE as the stream starts; each rank's server from the run's
    `port_range`, a different one, so that it cannot have come from the inherited variable. np<0, direct."""
    from tests.helpers import listening_sockets

    # below Linux's ephemeral range (32768-60999): no socket of an earlier test, bound to port 0, can be in them
    broker_range, run_range = (22200, 22300), (22400, 22500)
    monkeypatch.setenv("SPARKRUNNER_PORT_RANGE", "-".join(map(str, broker_range)))
    data = stream(frame(spark))
    monkeypatch.delenv("SPARKRUNNER_PORT_RANGE")
    ports = Runner(np=-2, launcher="direct", port_range=run_range, tracking=False).run_all(
        listens_while_reading, data
    )
    assert [len(found) for found in ports] == [1, 1], ports  # no process group: the stream's server alone
    assert all(run_range[0] <= port <= run_range[1] for found in ports for port in found), ports
    driver = [
        port for _, port in listening_sockets(os.getpid()) if broker_range[0] <= port <= broker_range[1]
    ]
    assert len(driver) == 1, driver  # the broker, still serving the stream (its run's channel has closed)
