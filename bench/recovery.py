"""Recovery time: from SIGKILL of an executor JVM to the first training step of the resumed attempt.

A torch DDP training (np=2, direct launcher) on local-cluster[2,1,1024] checkpoints every epoch; in epoch 2
of attempt 0 the bench kills the executor JVM that hosts rank 1. Prints, per repeat and as medians: when the
driver noticed (attempt 0 ended), when attempt 1 started (slots back), and when its first step ran.

    .venv/bin/python bench/recovery.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MASTER = "local-cluster[2,1,1024]"
FAILING_EPOCH = 2


def train(marker: str, first_step_file: str) -> None:
    """DDP fit with a checkpoint per epoch; attempt 0's rank 1 signals `marker` in epoch 2 and waits."""
    import torch
    import torch.distributed as dist

    import sparkrunner

    ctx = sparkrunner.rank_context()
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = sparkrunner.load_checkpoint()
    start = 0 if state is None else state["next_epoch"]
    if state is not None:
        model.module.load_state_dict(state["model"])
    x = torch.randn(64, 8)
    for epoch in range(start, 4):
        if ctx.attempt == 0 and epoch == FAILING_EPOCH:
            if ctx.rank == 1:
                Path(marker).touch()
            while not sparkrunner.stopping():
                time.sleep(0.02)
            raise RuntimeError("stopped")
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if ctx.attempt > 0 and epoch == start and ctx.rank == 0:
            Path(first_step_file).write_text(repr(time.time()))
        sparkrunner.save_checkpoint({"model": model.module.state_dict(), "next_epoch": epoch + 1})
        dist.barrier()
    dist.destroy_process_group()


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def rank_one_executor_jvm(run_id: str) -> int:
    """The executor JVM above rank 1 of `run_id`, found in the process table."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"SPARKRUNNER_RUN_ID={run_id}".encode() in env and b"RANK=1" in env:
            pid = int(entry)
            while pid > 1 and "CoarseGrainedExecutorBackend" not in _cmdline(pid):
                pid = _parent(pid)
            if pid > 1:
                return pid
    raise RuntimeError("rank 1's executor JVM was not found")


def one_recovery(spark: Any) -> dict[str, float]:
    from sparkrunner import Runner
    from sparkrunner.placement.slots import task_slots

    with tempfile.TemporaryDirectory(prefix="sparkrunner-bench-recovery-") as tmp:
        marker, first_step = os.path.join(tmp, "ready"), os.path.join(tmp, "first-step")
        runner = Runner(
            np=2, launcher="direct", max_failures=1, checkpoint_dir=os.path.join(tmp, "ckpt"), tracking=False
        )
        killed_at: list[float] = []

        def kill() -> None:
            while not os.path.exists(marker):
                time.sleep(0.01)
            assert runner.last_run is not None
            jvm = rank_one_executor_jvm(runner.last_run.run_id)
            killed_at.append(time.time())
            os.kill(jvm, signal.SIGKILL)

        killer = threading.Thread(target=kill, daemon=True)
        killer.start()
        runner.run(train, marker, first_step)
        killer.join()
        attempts = runner.last_run.attempts if runner.last_run else []
        kill_t = killed_at[0]
        figures = {
            "noticed_s": (attempts[0].ended_at or kill_t) - kill_t,
            "restarted_s": attempts[1].started_at - kill_t,
            "first_step_s": float(Path(first_step).read_text()) - kill_t,
        }
    while task_slots(spark.sparkContext) < 2:  # the killed executor's replacement, before the next repeat
        time.sleep(0.5)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(MASTER)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = [one_recovery(spark) for _ in range(args.repeats)]
    finally:
        spark.stop()
    for i, row in enumerate(rows):
        print(f"repeat {i}: " + ", ".join(f"{k}={v:.1f}" for k, v in row.items()))
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(
        f"executor JVM killed -> driver noticed {medians['noticed_s']:.1f} s -> attempt 1 started "
        f"{medians['restarted_s']:.1f} s -> first resumed step {medians['first_step_s']:.1f} s "
        f"(median of {len(rows)}, {MASTER})"
    )


if __name__ == "__main__":
    main()
