"""What a pre-imported rank start would save: a new Python process importing the rank's modules (what every
attempt's rank pays today) against a fork of a process that imported them already (a fork server, or zygote,
per executor), whose child runs one torch op to show the fork is usable.

On a retried or resized attempt most of the resume time is this import (docs/elastic.md).

    PYTHONPATH=$PWD .venv/bin/python bench/rank_start.py [--repeats 3] [--modules torch,numpy]
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import time


def cold_start(modules: list[str]) -> float:
    """Seconds for a fresh interpreter to import `modules` and exit."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", f"import {', '.join(modules)}"], check=True)
    return time.monotonic() - started


def forked_start() -> float:
    """Seconds for a fork of this (pre-imported) process to run a torch op and exit successfully."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        import torch

        product = torch.ones(256, 256) @ torch.ones(256, 256)
        os._exit(0 if float(product[0, 0]) == 256.0 else 3)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError("the forked child could not run a torch op")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modules", default="torch,numpy")
    args = parser.parse_args()
    modules = args.modules.split(",")
    cold = [cold_start(modules) for _ in range(args.repeats)]
    for name in modules:
        importlib.import_module(name)  # the zygote's imports; no torch op runs here before the forks
    forked = [forked_start() for _ in range(args.repeats)]
    print(f"load average {os.getloadavg()[0]:.1f}; modules {modules}; repeats {args.repeats}")
    print(f"new process + import: median {statistics.median(cold):.2f} s  {[round(c, 2) for c in cold]}")
    print(f"fork of pre-imported: median {statistics.median(forked):.3f} s  {[round(f, 3) for f in forked]}")


if __name__ == "__main__":
    main()
