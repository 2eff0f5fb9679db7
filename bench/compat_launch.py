"""Launch time of sparkrunner's TorchDistributor drop-in against pyspark's own TorchDistributor.

Both run the same no-op function with ``num_processes=2, local_mode=False, use_gpu=False`` on
``local-cluster[2,1,1024]`` in one warm SparkSession (one uncounted warm-up each); prints each median and the
ratio. Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.compat_launch [--repeats N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

from bench.launch import MASTER, NP, bench_session, noop
from bench.timing import timed


def contenders() -> dict[str, Callable[[], Any]]:
    """The same call through each TorchDistributor: only the import differs."""
    from pyspark.ml.torch.distributor import TorchDistributor as Original

    from sparkrunner.compat import TorchDistributor as DropIn

    return {
        "sparkrunner.compat.TorchDistributor": lambda: DropIn(NP, local_mode=False, use_gpu=False).run(noop),
        "pyspark TorchDistributor": lambda: Original(NP, local_mode=False, use_gpu=False).run(noop),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    spark = bench_session()
    medians: dict[str, float] = {}
    try:
        for name, fn in contenders().items():
            times = timed(fn, args.repeats)
            medians[name] = statistics.median(times)
            print(f"{name:<38} median {medians[name]:6.2f} s   runs: {', '.join(f'{t:.2f}' for t in times)}")
    finally:
        spark.stop()
    ours, theirs = medians.values()
    print(
        f"\nnoop, num_processes={NP}, {MASTER}, {args.repeats} warm runs each: pyspark / drop-in = x{theirs / ours:.1f}"
    )
    print(f"load average (1, 5, 15 min): {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
