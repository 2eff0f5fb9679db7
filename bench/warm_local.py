"""Local runs start warm: the wall time of each of `--runs` calls of one np=-2 torch DDP function (gloo, a linear
model, one step) in one driver process, with ``cold_start=True`` (every rank a new interpreter importing torch, and
torch._dynamo when DDP wraps the model) and with the default (ranks forked from the driver's import zygote: the first
run starts it, later runs find torch and torch._dynamo imported). Each mode runs in a driver process of its own;
the function reports whether torch was imported before it, so the table says what each run paid for. The 1-minute
load average is printed: on a shared machine it explains most of the spread.

    PYTHONPATH=$PWD .venv/bin/python bench/warm_local.py [--runs 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as a script from anywhere


def ddp_step() -> bool:
    """One DDP step on two ranks; whether torch was imported before this function."""
    had_torch = "torch" in sys.modules
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    model(torch.ones(4, 8)).sum().backward()
    dist.destroy_process_group()
    return had_torch


def one_mode(cold: bool, runs: int) -> list[tuple[float, bool]]:
    from sparkrunner import Runner

    found = []
    for _ in range(runs):
        runner = Runner(np=-2, launcher="direct", tracking=False, progress=False, cold_start=cold)
        start = time.perf_counter()
        had_torch = runner.run(ddp_step)
        found.append((time.perf_counter() - start, had_torch))
        time.sleep(
            2
        )  # a user's next cell: the idle zygote imports torch._dynamo meanwhile (ZYGOTE_WARM_AFTER_S)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--mode", choices=("cold", "warm"), help=argparse.SUPPRESS)  # one driver's part
    args = parser.parse_args()
    if args.mode is not None:
        print(json.dumps(one_mode(args.mode == "cold", args.runs)))
        return 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    print("| mode | " + " | ".join(f"run {i + 1} (s)" for i in range(args.runs)) + " |")
    print("|---|" + "--:|" * args.runs)
    for mode in ("cold", "warm"):
        out = subprocess.run(
            [sys.executable, __file__, "--mode", mode, "--runs", str(args.runs)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        times = json.loads(out.strip().splitlines()[-1])
        cells = [f"{seconds:.2f}{' (torch imported)' if had else ''}" for seconds, had in times]
        print(f"| {mode} | " + " | ".join(cells) + " |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
