"""Output storm: what a rank's printing costs under sparkrunner against the same code without it.

Three workloads, each run bare (a plain `python` subprocess whose stdout a reader drains, as a terminal or
notebook would) and as `Runner(np=-1, launcher="direct").run(...)` with the driver's stdout sent to
/dev/null: 1,000,000 short lines, 15 MB of tqdm-style `\\r` updates, one 40 MB line. Prints wall times side
by side, sparkrunner's launch floor (a no-op run), the ratios, and the driver's peak memory growth.

    PYTHONPATH=$PWD .venv/bin/python bench/output.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

WORKLOADS = {
    "1,000,000 lines": "lines",
    "15 MB of \\r updates": "updates",
    "one 40 MB line": "long_line",
}


def storm(kind: str) -> float:
    """The rank's work: print a storm of output; returns the seconds the printing took."""
    start = time.perf_counter()
    write = sys.stdout.write
    if kind == "lines":
        for i in range(1_000_000):
            print(f"line {i}")
    elif kind == "updates":
        for i in range(300_000):  # 50 characters each: 15 MB
            write(f"\r{i:>9}it [00:01, 250000.00it/s, loss=0.1234]  ")
        write("\n")
    else:
        write("x" * 40_000_000 + "\n")
    sys.stdout.flush()
    return time.perf_counter() - start


def noop() -> int:
    return 0


def bare(kind: str) -> float:
    """Wall time of `storm(kind)` in a fresh interpreter whose stdout a reader drains."""
    code = f"import sys; sys.path.insert(0, {os.getcwd()!r}); from bench.output import storm; storm({kind!r})"
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    while proc.stdout.read(1 << 16):
        pass
    proc.wait()
    return time.perf_counter() - start


@contextlib.contextmanager
def driver_output_discarded() -> Iterator[None]:
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


class PeakRss:
    """Samples this process's resident memory while the block runs; `growth_mb` is peak minus start."""

    def __init__(self) -> None:
        import psutil

        self._proc = psutil.Process()
        self._start = self._peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self._peak = max(self._peak, self._proc.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth_mb(self) -> float:
        return (self._peak - self._start) / 2**20


def timed(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    repeats = parser.parse_args().repeats
    import cloudpickle

    from sparkrunner import Runner

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    runner = Runner(np=-1, launcher="direct", tracking=False, progress=False)
    with driver_output_discarded():
        runner.run(noop)  # warm up
        floor = timed(lambda: runner.run(noop), repeats)
    print(f"sparkrunner launch floor (no-op run): {floor:.2f} s   [median of {repeats}]")
    print(
        f"{'workload':<22}{'bare s':>9}{'sparkrunner s':>15}{'ratio':>8}{'ratio minus floor':>19}{'driver MB':>11}"
    )
    for label, kind in WORKLOADS.items():
        plain = timed(functools.partial(bare, kind), repeats)
        with driver_output_discarded(), PeakRss() as rss:
            ours = timed(functools.partial(runner.run, storm, kind), repeats)
        print(
            f"{label:<22}{plain:>9.2f}{ours:>15.2f}{ours / plain:>8.2f}{(ours - floor) / plain:>19.2f}"
            f"{rss.growth_mb:>11.1f}"
        )


if __name__ == "__main__":
    main()
