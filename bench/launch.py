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
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as a script from anywhere
from bench.spark_session import quiet_session
from bench.timing import interleaved, seconds
from sparkrunner.observe.observers import RunObserver

if TYPE_CHECKING:
    from sparkrunner.observe.events import LaunchEvent

MASTER = "local-cluster[2,1,1024]"
NP = 2
SETTLE_S = 2.0
"""A pause before each timed call: horovod.spark.run's processes are still ending when it returns, and on two cores
they slowed the next contenders (the floor without allGather read 0.63 s right after it against 0.20 s elsewhere)."""


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
    """A run observer noting when (``time.monotonic``, the clock of the ranks' own launch times) the driver's
    hooks fire, and the first rank's launch times: the run's own anatomy. On local-cluster the driver, the tasks
    and the ranks share one host, so their monotonic clocks are one clock."""

    def __init__(self) -> None:
        super().__init__()
        self.at: dict[str, float] = {}
        self._launches: dict[int, LaunchEvent] = {}
        self._lock = threading.Lock()

    def on_start(self, record: Any) -> None:
        self.at["on_start"] = time.monotonic()

    def on_rank_launch(self, rank: int, launch: LaunchEvent) -> None:
        self._launches[rank] = launch

    def on_rank_start(self, rank: int) -> None:
        now = time.monotonic()
        with self._lock:
            if "first rank connected" not in self.at:
                self.at["first rank connected"] = now
                self.at.update(_launch_points(self._launches.get(rank)))
            self.at["last rank connected"] = now

    def on_rank_exit(self, rank: int, error: Any) -> None:
        self.at["last rank returned"] = time.monotonic()

    def on_end(self, record: Any) -> None:
        self.at["on_end"] = time.monotonic()


LAUNCH_POINTS = {
    "task entered": "task_entered",
    "addresses exchanged": "addresses_exchanged",
    "spawned": "spawned",
    "interpreter up": "interpreter_up",
    "imports done": "imports_done",
    "connected": "connected",
}
"""Anatomy point -> the `LaunchEvent` field it reads (the first rank's)."""


def _launch_points(launch: LaunchEvent | None) -> dict[str, float]:
    if launch is None:
        return {}
    found = {point: getattr(launch, name) for point, name in LAUNCH_POINTS.items()}
    return {point: value for point, value in found.items() if value is not None}


SEGMENTS = (
    ("run() to on_start", "call", "on_start", "options, placement, the MLflow run, pickling the function"),
    ("barrier stage", "on_start", "task entered",
     "stage submitted, its tasks started, their Python workers, the task function unpickled"),
    ("address exchange", "task entered", "addresses exchanged", "channel: every task's Join, the driver's answer"),
    ("task to spawn", "addresses exchanged", "spawned", "the task's services, the secret drop, the rank's environment"),
    ("process start", "spawned", "interpreter up", "fork+exec of python, its site, up to sparkrunner's first line"),
    ("imports", "interpreter up", "imports done", "what the rank bootstrap imports"),
    ("rank connects", "imports done", "connected", "rank setup, output relay and channel connection (handshake)"),
    ("hello delivered", "connected", "first rank connected", "channel: Hello reaches the driver"),
    ("to last rank connected", "first rank connected", "last rank connected", "the other rank's skew"),
    ("to last rank returned", "last rank connected", "last rank returned", "function loaded, run, result sent"),
    ("to on_end", "last rank returned", "on_end", "ranks exit, the stage ends, the MLflow run closes"),
    ("on_end to return", "on_end", "return", "the driver's teardown after its observers"),
)  # fmt: skip


def anatomy(repeats: int, tracking: bool = True) -> list[str]:
    """Median seconds of each segment of a noop np=2 direct run (one warm-up run), on the host's monotonic
    clock: the driver's hooks and the first rank's launch times (task, rank)."""
    from sparkrunner import Runner

    runs = []
    for _ in range(repeats + 1):
        stamps = Stamps()
        runner = Runner(np=NP, launcher="direct", tracking=tracking, observers=[stamps])
        stamps.at["call"] = time.monotonic()
        runner.run(noop)
        stamps.at["return"] = time.monotonic()
        runs.append(stamps.at)
    runs = runs[1:]
    lines = [f"anatomy of sparkrunner direct{'' if tracking else ', no MLflow'} (median of {repeats}):"]
    for label, start, end, meaning in SEGMENTS:
        timed_runs = [r[end] - r[start] for r in runs if start in r and end in r]
        seconds = f"{statistics.median(timed_runs):6.3f} s" if timed_runs else "     - "
        lines.append(f"  {label:26s} {seconds}   {meaning}")
    lines.append(f"  {'whole run':26s} {statistics.median(r['return'] - r['call'] for r in runs):6.3f} s")
    lines += [f"  {label:26s} {seconds:6.3f} s" for label, seconds in process_costs(repeats).items()]
    return lines


def process_costs(repeats: int) -> dict[str, float]:
    """Median seconds of what a rank's start is made of, measured apart: pickling the function, a bare Python
    start, a Python start that imports what a rank imports (sparkrunner's rank side and its channel)."""
    import subprocess

    import cloudpickle

    def median(fn: Callable[[], Any]) -> float:
        return statistics.median(seconds(fn) for _ in range(repeats))

    rank_imports = "import sparkrunner.ranks.bootstrap"
    return {
        "(pickling the function)": median(lambda: cloudpickle.dumps(noop)),
        "(python -c pass)": median(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True)),
        "(python, rank imports)": median(
            lambda: subprocess.run([sys.executable, "-c", rank_imports], check=True)
        ),
    }


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
        chosen = {name: fn for name, fn in contenders(spark).items() if not args.only or name in args.only}
        for fn in chosen.values():  # one warm-up each
            fn()
        for name, times in interleaved(chosen, args.repeats, SETTLE_S).items():
            medians[name] = statistics.median(times)
            print(f"{name:<32} median {medians[name]:6.2f} s   runs: {', '.join(f'{t:.2f}' for t in times)}")
    finally:
        spark.stop()
    ours = medians.get("sparkrunner direct") or next(iter(medians.values()))
    print(
        f"\nnoop, np={NP}, {MASTER}, {args.repeats} warm runs each, interleaved; ratio = their median / sparkrunner direct "
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
