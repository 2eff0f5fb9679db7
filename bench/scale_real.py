"""Real processes at the scale this machine allows: a Gloo allreduce by 32 local ranks and by 16 Spark executors.

Each row is one run (these are CPU-heavy: on 2 cores every rank's `import torch` alone costs about 1.4 s), timed
from the call to its return, with the load average before and after it:

- `np=-32` with the `direct` and `mpirun` launchers, against 32 bare processes (the floor: `import torch`,
  `init_process_group("gloo")` through the same `env://` TCPStore rendezvous that sparkrunner's ranks use,
  one allreduce, `os._exit`), started at once by this process;
- `np=16` on `local-cluster[16,1,512]` (16 executors of 512 MB, one core each) with both launchers, against a barrier
  stage whose 16 tasks each start one bare process (the floor under Spark) and against 16 bare processes.

The allreduce sums the ranks' indices: every row checks the sum against n(n-1)/2, and checks that no rank,
mpirun or agent process of this run is left once it returned ("ended cleanly"). MLflow tracking is off.

    PYTHONPATH=$PWD nice -n 5 .venv/bin/python bench/scale_real.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable as a script from anywhere

from bench.spark_session import quiet_session

LOCAL_RANKS = 32
EXECUTORS = 16
EXECUTOR_MB = 512
_LEFTOVER_MARKS = ("sparkrunner.ranks.bootstrap", "sparkrunner.tasks.rsh_agent", "mpirun", "orted")
BARE_RANK = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank())])
dist.all_reduce(total)
dist.destroy_process_group()
print(int(total.item()), flush=True)
os._exit(0)
"""
"""What each bare process does: what `allreduce` does in a sparkrunner rank, without sparkrunner. It skips the
interpreter's teardown as sparkrunner's ranks do (`ranks/fast_exit.py`): with torch loaded, a normal exit
costs seconds (7 s for 2 processes at load 23 here), which would put the floor above sparkrunner."""


def allreduce() -> int:
    """The function every sparkrunner rank runs: rendezvous, sum the ranks' indices, leave."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    dist.destroy_process_group()
    return int(total.item())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bare_env(rank: int, world: int, port: int) -> dict[str, str]:
    master = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    return os.environ | master | {"RANK": str(rank), "WORLD_SIZE": str(world)}


def bare_processes(world: int) -> int:
    """`world` bare processes started at once; rank 0's sum."""
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BARE_RANK],
            env=_bare_env(r, world, port),
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    outputs = [proc.communicate()[0] for proc in procs]
    if any(proc.returncode for proc in procs):
        raise RuntimeError(f"a bare process failed: exit codes {[proc.returncode for proc in procs]}")
    return int(outputs[0])


def spark_floor(spark: Any, world: int) -> Callable[[], int]:
    """A barrier stage whose tasks each start one bare process (no sparkrunner); rank 0's sum."""

    def run() -> int:
        port = _free_port()
        code, python = BARE_RANK, sys.executable

        def task(_: Any) -> Any:
            import os
            import subprocess

            from pyspark import BarrierTaskContext

            rank = BarrierTaskContext.get().partitionId()
            env = os.environ | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
            env |= {"RANK": str(rank), "WORLD_SIZE": str(world)}
            yield subprocess.run(
                [python, "-c", code], env=env, check=True, capture_output=True, text=True
            ).stdout

        rdd = spark.sparkContext.parallelize(range(world), world).barrier().mapPartitions(task)
        return int(rdd.collect()[0])

    return run


def _leftovers() -> list[str]:
    """This run's rank, agent and mpirun processes still alive (descendants of this process only)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if any(mark in cmdline for mark in _LEFTOVER_MARKS):
            found.append(f"{proc.pid}: {cmdline[:80]}")
    return found


def _sparkrunner(np: int, launcher: Literal["direct", "mpirun"]) -> Callable[[], int]:
    from sparkrunner import Runner

    return lambda: Runner(np=np, launcher=launcher, tracking=False).run(allreduce)


def local_rows(world: int) -> dict[str, tuple[int, Callable[[], int]]]:
    return {
        f"{world} bare processes": (world, lambda: bare_processes(world)),
        f"np=-{world} direct": (world, _sparkrunner(-world, "direct")),
        f"np=-{world} mpirun": (world, _sparkrunner(-world, "mpirun")),
    }


def spark_rows(spark: Any, world: int) -> dict[str, tuple[int, Callable[[], int]]]:
    return {
        f"{world} bare processes": (world, lambda: bare_processes(world)),
        f"Spark floor, {world} tasks": (world, spark_floor(spark, world)),
        f"np={world} direct": (world, _sparkrunner(world, "direct")),
        f"np={world} mpirun": (world, _sparkrunner(world, "mpirun")),
    }


def spark_session(executors: int) -> Any:
    """local-cluster[`executors`,1,`EXECUTOR_MB`] with every executor registered and its Python worker
    started (not counted in any row)."""
    master = f"local-cluster[{executors},1,{EXECUTOR_MB}]"
    spark = quiet_session(master, **{"spark.executor.memory": f"{EXECUTOR_MB}m"})
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    while status().size() < executors + 1:  # the executors and the driver
        time.sleep(1)
    spark.sparkContext.parallelize(range(executors), executors).barrier().mapPartitions(
        lambda it: it
    ).collect()
    return spark


def time_row(name: str, world: int, fn: Callable[[], int]) -> tuple[float, str]:
    """Run `fn` once; its time, and a printable row with the load around it and the checks' outcome."""
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    total = fn()
    seconds = time.perf_counter() - start
    expected = world * (world - 1) // 2
    checks = "sum ok" if total == expected else f"SUM {total} != {expected}"
    left = _leftovers()
    checks += ", ended cleanly" if not left else f", LEFT {len(left)}: {left[0]}"
    return (
        seconds,
        f"{name:<28} {seconds:8.1f} s   load {load_before:5.1f} -> {os.getloadavg()[0]:5.1f}   {checks}",
    )


def run_rows(rows: dict[str, tuple[int, Callable[[], int]]], only: list[str] | None) -> None:
    """Time each row (those named in `only`, if given) and print it with its ratio to the first row's floor."""
    floor = None
    for name, (world, fn) in rows.items():
        if only and name not in only:
            continue
        seconds, line = time_row(name, world, fn)
        if floor is None and "bare" in name:
            floor = seconds
        ratio = f"   x{seconds / floor:4.2f}, {(seconds - floor) / world:+5.2f} s a rank" if floor else ""
        print(line + ratio, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="time only this row (repeatable)")
    parser.add_argument("--ranks", type=int, default=LOCAL_RANKS, help="ranks of the np<0 rows")
    parser.add_argument(
        "--executors", type=int, default=EXECUTORS, help="executors (and ranks) of the Spark rows"
    )
    parser.add_argument("--no-spark", action="store_true", help="only the local rows")
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; one run per row; ratio: to the bare row"
    )
    subprocess.run(
        [sys.executable, "-c", "import torch"], check=True
    )  # untimed: a first row paid a cold start
    run_rows(local_rows(args.ranks), args.only)
    if not args.no_spark:
        spark = spark_session(args.executors)
        try:
            run_rows(spark_rows(spark, args.executors), args.only)
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
