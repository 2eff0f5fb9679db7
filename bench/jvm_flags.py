"""CPU seconds of a short-lived Spark session with the JVM's default flags, with the flags the tests give every
JVM, and with those and the tests' class-data-sharing archive of Spark's classes (`JDK_JAVA_OPTIONS` in
tests/conftest.py; the archive is built first where missing): a `local-cluster[2,1,1024]` session (the driver JVM
and two executor JVMs) running a few small jobs, as a typical test module does.

Each variant runs in a child process inside its own cgroup (cpuacct, v1 or v2: needs root), so the JVMs' CPU
is counted whatever their parent; the ratio is printed last.

    PYTHONPATH=$PWD .venv/bin/python bench/jvm_flags.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.jvm_flags import TEST_JVM_FLAGS, build_archive, jvm_options

_V1 = Path("/sys/fs/cgroup/cpuacct")
_V2 = Path("/sys/fs/cgroup/unified")

SESSION = """
from bench.spark_session import quiet_session
spark = quiet_session("local-cluster[2,1,1024]", **{"spark.ui.enabled": "false"})
for _ in range(3):
    spark.range(1000).repartition(2).selectExpr("sum(id)").collect()
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).collect()
spark.stop()
"""


def _cgroup() -> tuple[Path, str]:
    """A new cgroup to count a child's CPU in, and the file that holds its CPU time."""
    name = f"sparkrunner-bench-{uuid.uuid4().hex[:8]}"
    if _V1.is_dir():
        return _V1 / name, "cpuacct.usage"
    return _V2 / name, "cpu.stat"


def _cpu_seconds(folder: Path, stat: str) -> float:
    text = (folder / stat).read_text()
    if stat == "cpuacct.usage":
        return int(text) / 1e9
    usage = dict(line.split() for line in text.splitlines())
    return int(usage["usage_usec"]) / 1e6


def session_cost(java_options: str | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one session run with `JDK_JAVA_OPTIONS=java_options` (None: unset)."""
    folder, stat = _cgroup()
    folder.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JDK_JAVA_OPTIONS"}
    if java_options:
        env["JDK_JAVA_OPTIONS"] = java_options
    joins = f'echo $$ > {folder / "cgroup.procs"} && exec {sys.executable} -c "$0"'
    started = time.monotonic()
    try:
        subprocess.run(["sh", "-c", joins, SESSION], env=env, check=True, capture_output=True)
        wall = time.monotonic() - started
        _wait_empty(folder)
        return wall, _cpu_seconds(folder, stat)
    finally:
        _wait_empty(folder, wait_s=0)
        folder.rmdir()


def _wait_empty(folder: Path, wait_s: float = 30.0) -> None:
    """Wait for the session's last process (an executor JVM still exiting) to leave the cgroup, then end any
    that is left."""
    deadline = time.monotonic() + wait_s
    while (folder / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = (folder / "cgroup.procs").read_text().split()
    for pid in left:
        os.kill(int(pid), 9)
    if left:
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    build_archive()
    variants = {"JVM defaults": None, f"tests' flags ({TEST_JVM_FLAGS})": TEST_JVM_FLAGS}
    variants["tests' flags and class-data archive"] = jvm_options()
    results = {}
    for label, options in variants.items():
        runs = [session_cost(options) for _ in range(args.repeats)]
        wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        results[label] = cpu
        print(f"{label}: {cpu:.1f} CPU s, {wall:.1f} s wall (median of {args.repeats})")
    default, flagged, archived = results.values()
    print(
        f"CPU ratio, tests' flags / defaults: {flagged / default:.2f}; with the archive / without: "
        f"{archived / flagged:.2f}"
    )


if __name__ == "__main__":
    main()
