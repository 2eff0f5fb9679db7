"""How fast a run ends once a rank dies, per launcher: the fault matrix's ``exit`` (``os._exit(3)``) and ``sigkill``
faults (tests/scenarios/faults/chaos.py), np=-2 on the driver and np=2 on local-cluster[2,1,1024]. Prints the
seconds from rank 1's death to the end of ``Runner.run`` (its error raised), per repeat and as medians, and the
difference of each mpirun median from direct's.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.dead_rank [--repeats 3] [--only local|spark]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.spark_session import checkout_on_pythonpath, quiet_session
from tests.scenarios.faults.chaos import judge, run_with_fault

FAULTS = ("exit", "sigkill")
LAUNCHERS = ("direct", "mpirun")
SESSION_CONF = {"spark.ui.enabled": "false", "spark.executor.memory": "768m"}


def seconds_to_end(fault: str, launcher: str, np: int, spark: Any) -> float:
    """One run of `fault`: the seconds from rank 1's death to the run's end (its outcome checked as the matrix does)."""
    with tempfile.TemporaryDirectory(prefix="dead-rank-") as folder:
        outcome = run_with_fault(fault, launcher, np, Path(folder), spark)
    wrong = judge(fault, outcome, in_spark=np > 0)
    if wrong or outcome.after_fault_s is None:
        raise SystemExit(f"{fault} on {launcher}, np={np}: {wrong}")
    return outcome.after_fault_s


def placement(np: int, spark: Any, repeats: int) -> None:
    where = "np=-2 (driver)" if np < 0 else "np=2 (local-cluster[2,1,1024])"
    for fault in FAULTS:
        medians = {}
        for launcher in LAUNCHERS:
            times = [seconds_to_end(fault, launcher, np, spark) for _ in range(repeats)]
            medians[launcher] = statistics.median(times)
            shown = ", ".join(f"{t:.2f}" for t in times)
            print(f"{where} {fault:8} {launcher:7} {shown} s (median {medians[launcher]:.2f})", flush=True)
        print(
            f"{where} {fault:8} mpirun - direct: {medians['mpirun'] - medians['direct']:+.2f} s", flush=True
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["local", "spark"])
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    checkout_on_pythonpath()
    if args.only != "spark":
        placement(-2, None, args.repeats)
    if args.only != "local":
        spark = quiet_session("local-cluster[2,1,1024]", **SESSION_CONF)
        try:
            seconds_to_end("exit", "direct", 2, spark)  # warm-up: the executors' Python workers
            placement(2, spark, args.repeats)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
