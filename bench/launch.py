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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as a script from anywhere
from bench.spark_session import quiet_session
from bench.timing import timed
from sparkrunner.observe.observers import RunObserver

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


class Stamps(RunObserver):
    """A run observer noting when (``time.perf_counter``) the driver's hooks fire: the run's own anatomy."""

    def __init__(self) -> None:
        super().__init__()
        self.at: dict[str, float] = {}

    def on_start(self, record: Any) -> None:
        self.at["on_start"] = time.perf_counter()

    def on_rank_start(self, rank: int) -> None:
        self.at.setdefault("first rank connected", time.perf_counter())
        self.at["last rank connected"] = time.perf_counter()

    def on_rank_exit(self, rank: int, error: Any) -> None:
        self.at["last rank returned"] = time.perf_counter()

    def on_end(self, record: Any) -> None:
        self.at["on_end"] = time.perf_counter()


SEGMENTS = (
    ("run() to on_start", "call", "on_start", "options, placement, the MLflow run, the pickled function"),
    ("to first rank connected", "on_start", "first rank connected",
     "barrier stage submitted, task start, rank process (fork of the zygote), its imports, channel handshake"),
    ("to last rank connected", "first rank connected", "last rank connected", "the other rank's skew"),
    ("to last rank returned", "last rank connected", "last rank returned", "function loaded, run, result sent"),
    ("to on_end", "last rank returned", "on_end", "ranks exit, the stage ends, the MLflow run closes"),
    ("on_end to return", "on_end", "return", "the driver's teardown after its observers"),
)  # fmt: skip


def anatomy(repeats: int, tracking: bool = True) -> list[str]:
    """Median seconds of each segment of a noop np=2 direct run, on the driver's clock (one warm-up run)."""
    from sparkrunner import Runner

    runs = []
    for _ in range(repeats + 1):
        stamps = Stamps()
        runner = Runner(np=NP, launcher="direct", tracking=tracking, observers=[stamps])
        stamps.at["call"] = time.perf_counter()
        runner.run(noop)
        stamps.at["return"] = time.perf_counter()
        runs.append(stamps.at)
    runs = runs[1:]
    lines = [f"anatomy of sparkrunner direct{'' if tracking else ', no MLflow'} (median of {repeats}):"]
    for label, start, end, meaning in SEGMENTS:
        seconds = statistics.median(r[end] - r[start] for r in runs)
        lines.append(f"  {label:26s} {seconds:6.3f} s   {meaning}")
    lines.append(f"  {'whole run':26s} {statistics.median(r['return'] - r['call'] for r in runs):6.3f} s")
    lines += [f"  {label:26s} {seconds:6.3f} s" for label, seconds in process_costs(repeats).items()]
    return lines


def process_costs(repeats: int) -> dict[str, float]:
    """Median seconds of what a rank's start is made of, measured apart: pickling the function, a bare Python
    start, a Python start that imports what a rank imports (sparkrunner's rank side and its channel)."""
    import subprocess

    import cloudpickle

    def seconds(fn: Callable[[], Any]) -> float:
        return statistics.median(timed_once(fn) for _ in range(repeats))

    rank_imports = "import sparkrunner.ranks.bootstrap"
    return {
        "(pickling the function)": seconds(lambda: cloudpickle.dumps(noop)),
        "(python -c pass)": seconds(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)),
        "(python, rank imports)": seconds(
            lambda: subprocess.run([sys.executable, "-c", rank_imports], check=True)
        ),
    }


def timed_once(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


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
    parser.add_argument("--no-anatomy", action="store_true", help="skip the itemised sparkrunner direct runs")
    args = parser.parse_args()
    spark = bench_session()
    medians: dict[str, float] = {}
    parts: list[str] = []
    try:
        if not args.no_anatomy:
            parts = anatomy(args.repeats) + anatomy(args.repeats, tracking=False)
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
    floor = medians.get("Spark floor, no allGather")
    if floor:
        print(
            f"  sparkrunner direct / the floor without allGather: {ours / floor:.2f}x (target: toward 1.5x)"
        )
    print("\n".join(["", *parts]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
