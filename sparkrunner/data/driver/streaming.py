"""`stream(df)`: feed a DataFrame to the ranks from Spark tasks while they train, without writing a copy."""

from __future__ import annotations

import itertools
import json
import logging
import uuid
import weakref
from collections.abc import Iterable
from typing import Any

from sparkrunner.common.checks import check_number
from sparkrunner.data import columns
from sparkrunner.data.driver.materialize import converted
from sparkrunner.data.driver.stream_broker import StreamBroker
from sparkrunner.data.stream_handle import StreamData
from sparkrunner.data.workers.stream_feeder import COUNT_SCHEMA, partition_counter
from sparkrunner.errors import InvalidArgumentError, NotEnoughSlotsError
from sparkrunner.log_handler import install_default_handler
from sparkrunner.placement.connect import session_client_address
from sparkrunner.placement.slots import session_slots
from sparkrunner.placement.spark_sessions import context_conf, is_connect_session

log = logging.getLogger(__name__)

BUFFER_BYTES = 256 * 2**20
"""Default bound, per rank, on the Arrow batches it holds that it has not taken yet."""

_BROKERS: dict[str, StreamBroker] = {}  # stream_id -> the broker serving it (driver only)


def stream(
    df: Any,
    *,
    shuffle: bool = True,
    seed: int = 0,
    float32: bool = True,
    vectors_to_arrays: bool = True,
    buffer_bytes: int = BUFFER_BYTES,
    host: str | None = None,
) -> StreamData:
    """A handle the ranks read `df` through, each epoch one pass of `df` computed by Spark tasks on free slots.

    Read it with ``TorchLoader(data, batch_size)``, `NumpyLoader` or `tf_dataset`, as materialized data: every
    row once per epoch across the ranks, the same number of steps on every rank (``remainder`` as usual), and
    ``set_epoch(e)`` reshuffles the same way for the same `seed` (the loader's own shuffle and seed are not
    used: partitions are dealt to ranks in a seeded order, rows mixed within each rank's window). Nothing is
    written to disk: record batches travel from the tasks straight to the ranks (not through the driver) over
    encrypted connections, at most `buffer_bytes` waiting per rank. `stream` counts every partition's rows once
    (persist() `df` to make that and every epoch cheaper). Conversions as in `materialize` (`float32`,
    `vectors_to_arrays`). `host` is the address Spark tasks reach this process at (default:
    ``spark.driver.host``; over Spark Connect, this machine's address on the route to the server, or
    $SPARKRUNNER_DRIVER_HOST).
    The stream is served while the handle lives on the driver; `close_stream` ends it sooner.
    """
    install_default_handler()
    if not hasattr(df, "mapInArrow") or not hasattr(df, "schema"):
        raise InvalidArgumentError(f"stream takes a Spark DataFrame, not a {type(df).__name__}")
    check_number("seed", seed, 0)
    check_number("buffer_bytes", buffer_bytes, 1)
    columns.check_spark_schema(df.schema, vectors_to_arrays)
    frame = converted(df, float32)
    shuffles = _has_exchange(frame)
    partition_rows, lengths = _count(frame, shuffles)
    advertised, bind = _addresses(frame.sparkSession, host)
    broker = StreamBroker(frame, bind, shuffles)
    data = StreamData(
        uuid.uuid4().hex,
        (advertised, broker.port),
        broker.secret,
        columns.from_arrow(_arrow_schema(frame), lengths),
        partition_rows,
        shuffle,
        seed,
        buffer_bytes,
    )
    broker.data = data
    _BROKERS[data.stream_id] = broker
    weakref.finalize(data, _close, data.stream_id)
    log.info("streaming %s", data)
    return data


def close_stream(data: StreamData) -> None:
    """Stop serving `data` now: feeders still running are cancelled, ranks still reading get an error."""
    _close(data.stream_id)


def _close(stream_id: str) -> None:
    broker = _BROKERS.pop(stream_id, None)
    if broker is not None:
        broker.close()


def _count(frame: Any, shuffles: bool) -> tuple[tuple[int, ...], dict[str, int]]:
    """Every partition's rows, and the first row's list lengths, without sending Python any row.

    A plan with no exchange keeps its partitions whichever columns are computed (they come from its sources:
    a range, files, a cache), so its rows are counted over a pruned plan that skips every column, pandas UDFs
    included; a plan with one (`shuffles`) is counted over its own columns (see `_count_every_column`)."""
    lists = tuple(f.name for f in _arrow_schema(frame) if columns.is_list(f.type))
    if shuffles:
        return _count_every_column(frame, lists)
    F = _functions(frame)
    rows = _count_pruned(frame.select(F.lit(True).alias("counted")))
    if not lists or not any(rows):
        return rows, {}
    first = frame.select(*[F.size(F.col(f"`{c}`")).alias(c) for c in lists]).limit(1).collect()
    return rows, {name: int(first[0][name]) for name in lists} if first else {}


def _count_pruned(pruned: Any) -> tuple[int, ...]:
    """Rows per partition of `pruned` (one constant column), counted in the JVM where there is one: Spark's
    `zipWithIndex` counts the rows of every partition but the last to number them, so one empty partition
    appended makes that every partition, with no row leaving the JVM and nothing written. Over Spark Connect,
    a `mapInArrow` pass that receives only the constant column."""
    if is_connect_session(pruned.sparkSession):
        return _counted(pruned, ())[0]
    context = pruned.sparkSession.sparkContext
    empty = context._jsc.parallelize(context._jvm.java.util.ArrayList(), 1).rdd()
    numbered = pruned._jdf.queryExecution().toRdd().union(empty).zipWithIndex()
    starts = [int(partition.startIndex()) for partition in numbered.partitions()]
    return tuple(high - low for low, high in itertools.pairwise(starts))


def _count_every_column(frame: Any, lists: tuple[str, ...]) -> tuple[tuple[int, ...], dict[str, int]]:
    """The count of a plan with an exchange: a few integers per row (the list columns' lengths, one hash of the
    others), so that every column is computed and nothing is pruned. Pruning could change how Spark splits the
    exchange's output (adaptive execution coalesces partitions by their bytes), and the plan counted must be
    the plan the feeders run. Nothing is shuffled or written beyond what `df` does itself."""
    F = _functions(frame)
    scalars = [F.col(f"`{c}`") for c in frame.columns if c not in lists]
    small = [F.size(F.col(f"`{c}`")).alias(c) for c in lists] + [F.hash(*scalars if scalars else [F.lit(0)])]
    return _counted(frame.select(*small), lists)


def _counted(frame: Any, lists: tuple[str, ...]) -> tuple[tuple[int, ...], dict[str, int]]:
    """Rows per partition of `frame` (empty ones too) and the `lists` lengths of its first row, in one pass."""
    counted = frame.mapInArrow(partition_counter(lists), COUNT_SCHEMA).collect()
    found = {row["partition"]: row for row in counted}
    rows = tuple(found[p]["rows"] if p in found else 0 for p in range(max(found, default=-1) + 1))
    first = next((found[p] for p in sorted(found) if found[p]["rows"]), None)
    return rows, json.loads(first["list_lengths"]) if first is not None else {}


def _has_exchange(frame: Any) -> bool:
    """Whether `frame`'s physical plan moves rows between partitions (a shuffle, a broadcast, a global limit)."""
    if is_connect_session(frame.sparkSession):
        plan = str(frame._explain_string(mode="simple"))
    else:
        plan = str(frame._jdf.queryExecution().executedPlan().toString())
    return "Exchange" in plan or "Limit" in plan


def _functions(frame: Any) -> Any:
    """Spark's functions for `frame`'s kind of session (the classic ones build classic columns)."""
    if is_connect_session(frame.sparkSession):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions

    return functions


def _arrow_schema(frame: Any) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(frame.schema)


def _addresses(spark: Any, host: str | None) -> tuple[str, str]:
    """(the address feeder tasks dial, the address the broker listens on)."""
    if is_connect_session(spark):
        advertised = host or session_client_address(spark)
        return advertised, advertised if advertised.startswith("127.") else "0.0.0.0"
    conf = context_conf(spark.sparkContext)
    advertised = host or str(conf.get("spark.driver.host", "127.0.0.1"))
    return advertised, str(conf.get("spark.driver.bindAddress", advertised))


def check_feeder_slots(arguments: Iterable[Any], barrier_tasks: int) -> None:
    """Before any rank starts: refuse a run that reads a stream when no task slot is left for its feeders."""
    for data in (value for value in arguments if isinstance(value, StreamData)):
        broker = _BROKERS.get(data.stream_id)
        if broker is None:
            raise InvalidArgumentError(
                f"{data!r} is closed (or was made by another driver): call stream(df) again"
            )
        slots = session_slots(broker.frame.sparkSession)
        if slots is not None and slots - barrier_tasks < 1:
            raise NotEnoughSlotsError(
                f"streaming a DataFrame needs at least 1 task slot for its feeder tasks beside the "
                f"{barrier_tasks} barrier tasks, but this Spark cluster has {slots} slots in all. Give the "
                "feeders slots: more executor cores or executors (spark.executor.cores, "
                "spark.executor.instances), a smaller spark.task.cpus, or a stage-level resource profile that "
                "gives the barrier stage's tasks more CPUs than the default profile's; or materialize(df)."
            )
