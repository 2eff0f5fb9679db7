"""Local runs start warm: the wall time of each of `--runs` np=-2 runs of one function in one driver process, with
``cold_start=True`` (every rank a new interpreter importing torch and what the function loads) and with the default
(ranks forked from the driver's import zygote: the first run starts it, later runs find the function's frameworks
imported, and what they load on first use, which the idle zygote imported meanwhile). Rows:

- ``ddp``: one DistributedDataParallel step (gloo, a linear model; DDP loads torch._dynamo);
- ``ddp, env= per run``: the same, each run with its own ``env={"TRIAL": ...}`` (a sweep's trial tag), which is no
  part of the zygote's key: as fast as ``ddp``, which passes the same ``env=`` every run;
- ``lightning``: a one-epoch ``pytorch_lightning`` ``Trainer.fit`` with ``sparkrunner.lightning.ddp()``
  (`bench/frameworks_train.py`);
- ``hf_trainer``: the Hugging Face ``Trainer.train`` of a 1-layer BERT built from its config (the same file).

Each row and mode runs in a driver process of its own, 2 s between runs (a user's next cell). The last column is the
mean of the later runs over the first. The 1-minute load average is printed for each row: on a shared machine it
explains most of the spread.

    PYTHONPATH=$PWD .venv/bin/python bench/warm_local.py [--runs 3] [--rows ddp,env,lightning,hf_trainer]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as a script from anywhere

ROWS = {"ddp": "ddp", "env": "ddp, env= per run", "lightning": "lightning", "hf_trainer": "hf_trainer"}


def ddp_step() -> float:
    """One DDP step on two ranks."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    model(torch.ones(4, 8)).sum().backward()
    dist.destroy_process_group()
    return 0.0


def _function(row: str) -> Callable[[], Any]:
    if row in ("ddp", "env"):
        return ddp_step
    from bench import frameworks_train

    return {"lightning": frameworks_train.lightning, "hf_trainer": frameworks_train.hf_trainer}[row]


def one_mode(row: str, cold: bool, runs: int) -> list[float]:
    from sparkrunner import Runner

    function, seconds = _function(row), []
    for trial in range(runs):
        env = {"TRIAL": str(trial) if row == "env" else "0"}
        runner = Runner(np=-2, launcher="direct", tracking=False, progress=False, cold_start=cold, env=env)
        start = time.perf_counter()
        runner.run(function)
        seconds.append(time.perf_counter() - start)
        time.sleep(
            2
        )  # a user's next cell: the idle zygote imports what the ranks load on first use meanwhile
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--mode", choices=("cold", "warm"), help=argparse.SUPPRESS)  # one driver's part
    args = parser.parse_args()
    if args.mode is not None:
        print(json.dumps(one_mode(args.rows, args.mode == "cold", args.runs)))
        return 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    print(
        "| row | mode | "
        + " | ".join(f"run {i + 1} (s)" for i in range(args.runs))
        + " | later/first | load |"
    )
    print("|---|---|" + "--:|" * (args.runs + 2))
    for row in args.rows.split(","):
        for mode in ("cold", "warm"):
            out = subprocess.run(
                [sys.executable, __file__, "--mode", mode, "--rows", row, "--runs", str(args.runs)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            times = json.loads(out.strip().splitlines()[-1])
            later = sum(times[1:]) / max(1, len(times) - 1) / times[0]
            cells = " | ".join(f"{seconds:.2f}" for seconds in times)
            print(f"| {ROWS[row]} | {mode} | {cells} | {later:.2f} | {os.getloadavg()[0]:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
