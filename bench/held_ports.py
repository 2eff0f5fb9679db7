"""Launches beside a port thief: how many of N `np=-2` runs meet EADDRINUSE when a rank listens on its ports.

The thief (`tests.system.test_held_ports`) keeps binding hundreds of ports the kernel picks, as a busy executor
host's outgoing connections do; each rank listens on its own ports (TF worker; rank 0 also MASTER_PORT and the
JAX coordinator) 0.3 s after it starts, as a framework does after its imports.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m bench.held_ports [--runs 50] [direct] [mpirun]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Literal

from sparkrunner import Runner
from sparkrunner.errors import SparkRunnerError
from tests.system.test_held_ports import THIEF, listen_on_own_ports


def address_in_use(launcher: Literal["direct", "mpirun"], runs: int) -> int:
    """How many of `runs` launches failed because a port of theirs was taken."""
    runner = Runner(np=-2, launcher=launcher, tracking=False, progress=False)
    failed = 0
    for _ in range(runs):
        try:
            runner.run(listen_on_own_ports, 0.3)
        except SparkRunnerError as exc:
            if "Address already in use" not in str(exc):
                raise
            failed += 1
    return failed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("launchers", nargs="*", default=["direct", "mpirun"])
    args = parser.parse_args()
    thief = subprocess.Popen([sys.executable, "-c", THIEF])
    try:
        for launcher in args.launchers:
            failed = address_in_use(launcher, args.runs)
            print(f"{launcher}: {failed} of {args.runs} launches met EADDRINUSE", flush=True)
    finally:
        thief.kill()
        thief.wait()


if __name__ == "__main__":
    main()
