"""What the encrypted channel costs: a large result (rank 0 returns N MB of bytes) and a no-op launch, np=-1 and
np=-2 on the driver (direct launcher, no Spark, no MLflow), timed from run() to return.

Run it once with this tree and once with a tree from before encryption to compare (the figures are in
docs/security.md):

    PYTHONPATH=$PWD .venv/bin/python bench/transfer.py [--mb 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any


def big_result(size: int) -> bytes:
    return bytes(size)


def noop() -> int:
    return 0


def timed(fn: Callable[[], Any], repeats: int) -> list[float]:
    """One warm-up call (not counted), then `repeats` timed calls."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=1024, help="size of rank 0's result in MiB")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from sparkrunner import Runner, channel

    size = args.mb << 20
    encrypted = hasattr(channel, "RECORD_BYTES")
    print(f"sparkrunner from {channel.__file__} ({'AES-GCM records' if encrypted else 'HMAC frames, clear'})")

    def transfer() -> None:
        value = Runner(np=-1, launcher="direct", tracking=False, progress=False).run(big_result, size)
        assert len(value) == size

    launch = timed(lambda: Runner(np=-2, launcher="direct", tracking=False, progress=False).run(noop), 5)
    print(f"no-op launch, np=-2 direct: median {statistics.median(launch):.3f} s over {len(launch)}")
    times = timed(transfer, args.repeats)
    best = min(times)
    print(
        f"{args.mb} MiB result, np=-1 direct: median {statistics.median(times):.2f} s, best {best:.2f} s "
        f"({args.mb / 1024 / best:.2f} GiB/s end to end, pickling included)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
