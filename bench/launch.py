"""Launch overhead: a no-op function at np=2 on local-cluster[2,1,1024], timed from run() to return.

"sparkrunner direct" is the default experience, an MLflow run recorded per call; the "no MLflow" row shows
what tracking costs. Compares sparkrunner's launchers with Spark's TorchDistributor (and horovod.spark.run when Horovod is
installed) in one SparkSession, and prints each warm median and the ratios against sparkrunner.

    .venv/bin/python bench/launch.py [--repeats 5] [--only NAME ...]

"Spark floor" is a barrier stage whose tasks do one allGather and start one Python process each (what
TorchDistributor-like launchers pay); "Spark floor, no allGather" leaves the allGather out: Spark answers an
allGather no sooner than a second after it is called (its executor checks once a second), which sparkrunner
avoids by exchanging addresses over its own driver channel, so that row is the floor under sparkrunner.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as a script from anywhere
from bench.spark_session import quiet_session
from bench.timing import timed

MASTER = "local-cluster[2,1,1024]"
NP = 2


def noop() -> int:
    return 0


def _floor_task(_: Any) -> Any:
    import subprocess
    import sys

    from pyspark import BarrierTaskContext

    BarrierTaskContext.get().allGather("address")
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    yield 0


def _bare_floor_task(_: Any) -> Any:
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", "pass"], check=True)
    yield 0


def bare_spark_floor(spark: Any) -> Callable[[], Any]:
    """A barrier stage whose tasks start one Python process each and exchange nothing: the floor under
    sparkrunner."""
    return lambda: (
        spark.sparkContext.parallelize(range(NP), NP).barrier().mapPartitions(_bare_floor_task).collect()
    )


def spark_floor(spark: Any) -> Callable[[], Any]:
    """A barrier stage with an allGather that starts one Python process per task."""
    return lambda: (
        spark.sparkContext.parallelize(range(NP), NP).barrier().mapPartitions(_floor_task).collect()
    )


def contenders(spark: Any) -> dict[str, Callable[[], Any]]:
    from pyspark.ml.torch.distributor import TorchDistributor

    from sparkrunner import Runner

    found: dict[str, Callable[[], Any]] = {
        "Spark floor": spark_floor(spark),
        "Spark floor, no allGather": bare_spark_floor(spark),
        "sparkrunner direct": lambda: Runner(np=NP, launcher="direct").run(noop),
        "sparkrunner direct, no MLflow": lambda: Runner(np=NP, launcher="direct", tracking=False).run(noop),
        "TorchDistributor": lambda: TorchDistributor(num_processes=NP, local_mode=False, use_gpu=False).run(
            noop
        ),
    }
    found.update(extra_contenders(spark))
    return found


def extra_contenders(spark: Any) -> dict[str, Callable[[], Any]]:
    """Contenders that need optional installs (Horovod); empty when they are missing."""
    try:
        import bench.launch_horovod as horovod_bench
    except ImportError:
        return {}
    return dict(horovod_bench.contenders(NP, noop))


def bench_session(master: str = MASTER) -> Any:
    """The SparkSession every launch benchmark times in: `master` (default `MASTER`), quiet."""
    return quiet_session(master, **{"spark.executor.memory": "768m"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", action="append", help="time only this contender (repeatable)")
    args = parser.parse_args()
    spark = bench_session()
    medians: dict[str, float] = {}
    try:
        for name, fn in contenders(spark).items():
            if args.only and name not in args.only:
                continue
            times = timed(fn, args.repeats)
            medians[name] = statistics.median(times)
            print(f"{name:<32} median {medians[name]:6.2f} s   runs: {', '.join(f'{t:.2f}' for t in times)}")
    finally:
        spark.stop()
    ours = medians.get("sparkrunner direct") or next(iter(medians.values()))
    print(
        f"\nnoop, np={NP}, {MASTER}, {args.repeats} warm runs each; ratio = their median / sparkrunner direct "
        f"(or the first row timed)"
    )
    for name, median in medians.items():
        print(f"  {name:<32} {median:6.2f} s   x{median / ours:5.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
