"""Warm-session overhead: a no-op function at np=2, `Runner.run` (cold: new processes each call) against
`Runner.session().run` from the second run on (the ranks and their imports are kept); tracking off unless
``--tracking`` (then every run is recorded in MLflow: a cold run writes in the foreground, a session's
run creates its MLflow run before the ranks start and writes the rest from a background thread).

The function times itself on rank 0; the overhead is the call's wall time minus that. The 1-minute load
average is printed with the figures: on a shared machine it explains most of the spread.

    .venv/bin/python bench/warm_session.py [--repeats 20] [--placement np<0|spark] [--launcher direct|mpirun] [--tracking]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as a script from anywhere
from bench.launch import MASTER, NP, bench_session


def noop() -> float:
    """Time spent in the function itself (nothing), as the rank sees it."""
    start = time.perf_counter()
    import torch  # what a training function imports: paid once per process

    del torch
    return time.perf_counter() - start


def overheads(call: Any, repeats: int) -> list[float]:
    """`repeats` calls after one uncounted warm-up: each call's wall time minus the function's own."""
    call()
    found = []
    for _ in range(repeats):
        start = time.perf_counter()
        inside = call()
        found.append(time.perf_counter() - start - inside)
    return found


def show(name: str, times: list[float]) -> None:
    ms = [t * 1000 for t in times]
    print(
        f"{name:<28} median {statistics.median(ms):8.1f} ms   min {min(ms):7.1f}   max {max(ms):7.1f}   "
        f"({len(ms)} runs)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--cold-repeats", type=int, default=3)
    parser.add_argument("--placement", choices=("np<0", "spark"), default="np<0")
    parser.add_argument("--launcher", choices=("direct", "mpirun"), default="direct")
    parser.add_argument("--tracking", action="store_true", help="record every run in MLflow (its cost)")
    args = parser.parse_args()
    from sparkrunner import Runner

    spark = bench_session() if args.placement == "spark" else None
    np = NP if spark is not None else -NP
    runner = Runner(np=np, spark=spark, launcher=args.launcher, tracking=args.tracking, progress=False)
    try:
        show("cold Runner.run", overheads(lambda: runner.run(noop), args.cold_repeats))
        with runner.session() as session:
            show("warm session.run", overheads(lambda: session.run(noop), args.repeats))
            launches = session.launches
    finally:
        if spark is not None:
            spark.stop()
    where = MASTER if spark is not None else "local processes"
    print(
        f"\nnoop (imports torch), np={abs(np)}, {where}, launcher={args.launcher}, tracking {'on' if args.tracking else 'off'}; rank processes "
        f"started by the session: {launches}; load average (1 min) {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} cores"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
