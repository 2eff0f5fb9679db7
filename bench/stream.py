"""`stream(df)` against `materialize(df)` on the same DataFrame: time to the first batch, steady rows/s of one
rank's TorchLoader, and bytes written to disk by this process and its children (the Spark JVM, its Python
workers). The rank reads in this process (world_size=1), the feeders run as local Spark tasks. For scale, the
rows/s of one bare pass of the DataFrame into Spark's Python workers (`mapInArrow`, nothing sent): no stream
can outrun the Spark job that computes its rows. Petastorm's BatchedDataLoader on the materialized Parquet (in
its pinned environment, bench/data.py) is the other reader. `--persist` persists the DataFrame and counts it
once first, so that every pass reads Spark's cache instead of recomputing the rows.

    .venv/bin/python bench/stream.py [--rows 4000000] [--batch-size 1024] [--master local[2]] [--persist]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from bench.data import petastorm_rates
from bench.materialize import frame, session

PETASTORM = "petastorm BatchedDataLoader (torch)"


def written_bytes() -> int:
    """Bytes this process and every descendant wrote to storage so far (Linux /proc/<pid>/io)."""
    me = psutil.Process()
    total = 0
    for process in (me, *me.children(recursive=True)):
        try:
            total += process.io_counters().write_bytes
        except (psutil.Error, AttributeError):
            continue
    return total


def first_then_rest(make_loader: Callable[[], Any]) -> tuple[float, float, int]:
    """(seconds to the first batch including `make_loader`, seconds for the rest of the epoch, rows after it)."""
    start = time.perf_counter()
    batches: Iterator[Any] = iter(make_loader())
    first = next(batches)
    first_at = time.perf_counter() - start
    rows = 0
    steady = time.perf_counter()
    for batch in batches:
        rows += len(batch["label"])
    del first
    return first_at, time.perf_counter() - steady, rows


def bare_pass(df: Any) -> float:
    """Rows/s of one pass of `df` through `mapInArrow` that only counts: the Spark side of a stream alone."""

    def count(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"rows": [sum(batch.num_rows for batch in batches)]})

    start = time.perf_counter()
    rows = sum(row["rows"] for row in df.mapInArrow(count, "rows long").collect())
    return rows / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--persist", action="store_true", help="persist the DataFrame and count it once first"
    )
    args = parser.parse_args()
    from sparkrunner.data import TorchLoader, close_stream, materialize, stream

    df = frame(session(args.master), args.rows)
    if args.persist:
        df = df.persist()
        df.count()
    df.limit(1).collect()  # JVM and Python workers warm for both
    options = {"rank": 0, "world_size": 1}
    results = {}
    with tempfile.TemporaryDirectory(prefix="sparkrunner-bench-stream-") as cache:
        for name in ("materialize", "stream"):
            before = written_bytes()
            if name == "stream":
                data: Any = None

                def make() -> Any:
                    nonlocal data
                    data = stream(df)
                    return TorchLoader(data, args.batch_size, **options)
            else:

                def make() -> Any:
                    return TorchLoader(materialize(df, cache), args.batch_size, **options)

            first, rest, rows = first_then_rest(make)
            results[name] = (first, rows / rest, written_bytes() - before)
            if name == "stream":
                close_stream(data)
        petastorm = petastorm_rates(Path(materialize(df, cache).uri), args.batch_size, repeats=1)[PETASTORM]
    spark_rate = bare_pass(df)
    load = os.getloadavg()
    for name, (first, rate, written) in results.items():
        print(f"{name:12s} first batch {first:7.2f} s   steady {rate:11,.0f} rows/s   wrote {written:13,d} B")
    (m_first, m_rate, _), (s_first, s_rate, s_written) = results["materialize"], results["stream"]
    print(
        f"stream/materialize: first batch {s_first / m_first:.2f}x (target <= 0.2x), steady rows/s "
        f"{s_rate / m_rate:.2f}x (target >= 0.8x), bytes written by stream {s_written:,d} (target 0)"
    )
    print(f"{PETASTORM} on the materialized Parquet (rank 0 of 2): {petastorm:,.0f} rows/s per rank")
    print(f"stream/Petastorm steady rows/s: {s_rate / petastorm:.2f}x")
    print(f"one bare Spark pass of the DataFrame (mapInArrow, counting only): {spark_rate:,.0f} rows/s")
    print(f"rows {args.rows:,}, batch {args.batch_size}, master {args.master}, persisted {args.persist}")
    print(f"load average {load}")


if __name__ == "__main__":
    main()
