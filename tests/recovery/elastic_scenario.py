"""The elastic scenario (test and bench): 4 ranks; an executor is killed and its replacement held back, so the
run goes on at 2; the replacement is let go, and the run grows back to 4 at its next checkpoint.

`elastic_fit` trains a linear model with DDP on Parquet rows through `NumpyLoader`, with a fixed global batch
(`global_batch`), a checkpoint every `CHECKPOINT_EVERY` steps holding the loader's state, and, as its own
oracle, how many times each row was trained on in each epoch (summed over ranks with an all-reduce, rolled
back with the checkpoint like everything else). `ExecutorHolder` plays the cluster.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkrunner.data import ParquetData, materialize
from tests.recovery.processes import _cmdline, executor_jvm_of, rank_pid
from tests.waiting import poll_until

ROWS, GROUP_ROWS, GLOBAL_BATCH = 192, 32, 16
EPOCHS = 3
STEPS = EPOCHS * ROWS // GLOBAL_BATCH  # 36
CHECKPOINT_EVERY = 4
KILL_AT_STEP = 8  # attempt 0 (4 ranks) waits to lose an executor here
HOLD_AT_STEP = 16  # a smaller attempt waits here for the slots to come back (and the rescale stop)
LOSS_TOLERANCE = 0.10
"""Relative, on each epoch's mean loss (measured: within 1%). Step by step the losses differ: the global
batch has the same size, but after a resize it holds other rows than the uninterrupted run's at that step."""


def make_data(folder: Path) -> ParquetData:
    """`ROWS` rows of y = x @ w + noise in row groups of `GROUP_ROWS`, with a unique `id`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(11)
    x = rng.normal(size=(ROWS, 4)).astype(np.float32)
    y = (x @ np.array([1.5, -2.0, 0.5, 3.0], dtype=np.float32) + 0.1 * rng.normal(size=ROWS)).astype(
        np.float32
    )
    table = pa.table({"id": np.arange(ROWS), "x": list(x), "y": y})
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / "part-0.parquet", row_group_size=GROUP_ROWS)
    return materialize(str(folder))


def elastic_fit(data: ParquetData, marker_dir: str = "") -> dict[str, Any]:
    """Train `EPOCHS` epochs; rank 0 returns the per-step global losses, per-epoch row counts and the steps
    each attempt ran. With `marker_dir`: attempt 0 touches ``kill`` at step `KILL_AT_STEP` and waits to be
    stopped; an attempt below 4 ranks touches ``small`` at step `HOLD_AT_STEP` and waits for the rescale."""
    entered = time.time()
    import numpy as np
    import torch
    import torch.distributed as dist

    import sparkrunner
    from sparkrunner.data import NumpyLoader, global_batch

    ctx = sparkrunner.rank_context()
    mark = Timeline(marker_dir, ctx.attempt, ctx.rank, entered)
    dist.init_process_group("gloo")
    mark("process group formed")
    split = global_batch(GLOBAL_BATCH, world_size=ctx.world_size)
    loader = NumpyLoader(data, split.per_rank, shuffle=True, seed=3, shuffle_buffer_rows=64)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    mark("loader and model made")
    state = sparkrunner.load_checkpoint() or {
        "step": 0, "losses": [], "counts": np.zeros((EPOCHS, ROWS), np.int64), "loader": None, "ran": []
    }  # fmt: skip
    if state["loader"] is not None:
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])
    mark("checkpoint loaded")
    state["ran"] = [*state["ran"], (ctx.attempt, ctx.world_size, state["step"])]
    for epoch in range(loader.epoch, EPOCHS):
        loader.set_epoch(epoch)
        for batch in loader:
            mark("first batch read")
            state["losses"].append(_step(model, opt, batch, state["counts"][epoch], ctx.world_size))
            state["step"] += 1
            mark("first step")
            stop = _agreed(sparkrunner.stopping())
            if stop or state["step"] % CHECKPOINT_EVERY == 0:
                extra = {"model": model.module.state_dict(), "optimizer": opt.state_dict()}
                sparkrunner.save_checkpoint(
                    {**state, **extra, "loader": loader.state_dict()}, step=state["step"]
                )
                dist.barrier()
            if stop:
                dist.destroy_process_group()
                return {"stopped": ctx.stop_reason}
            _hold(marker_dir, ctx, state["step"])
    dist.destroy_process_group()
    return {"losses": state["losses"], "counts": state["counts"].tolist(), "ran": state["ran"]}


def _step(model: Any, opt: Any, batch: dict[str, Any], counts: Any, world_size: int) -> float:
    """One SGD step on the rank's batch (DDP averages the gradients); the global batch's mean loss."""
    import numpy as np
    import torch
    import torch.distributed as dist

    x = torch.from_numpy(np.ascontiguousarray(batch["x"]))
    y = torch.from_numpy(np.ascontiguousarray(batch["y"])).unsqueeze(1)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    seen = torch.from_numpy(np.bincount(batch["id"], minlength=len(counts)))
    dist.all_reduce(seen)
    counts += seen.numpy()
    total = loss.detach().clone()
    dist.all_reduce(total)
    return float(total) / world_size


def _agreed(flag: bool) -> bool:
    """True on every rank once any rank's `flag` is: ranks must leave the loop at the same step."""
    import torch
    import torch.distributed as dist

    value = torch.tensor([float(flag)])
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def _hold(marker_dir: str, ctx: Any, step: int) -> None:
    """Attempt 0 at `KILL_AT_STEP`: wait to lose an executor. Below 4 ranks at `HOLD_AT_STEP`: wait for the
    rescale stop (the next loop turn sees it, saves and returns)."""
    import sparkrunner

    kill = ctx.attempt == 0 and step == KILL_AT_STEP
    if not marker_dir or not (kill or (ctx.world_size < 4 and step == HOLD_AT_STEP)):
        return
    if ctx.rank == 0:
        Path(marker_dir, "kill" if kill else "small").touch()
    while not sparkrunner.stopping():
        time.sleep(0.02)
    if kill:  # its peers are gone with the executor: leave now, the next attempt resumes from step 8
        raise RuntimeError("stopped while waiting to lose an executor")


class Timeline:
    """A rank's start-up, for bench/elastic.py: when its process started (a fork or an exec), when the function
    was entered, and the first time each later phase is marked, in ``timeline-<attempt>-<rank>`` of
    `marker_dir` (one ``phase time`` line each, wall clock)."""

    def __init__(self, marker_dir: str, attempt: int, rank: int, entered: float) -> None:
        self._path = Path(marker_dir, f"timeline-{attempt}-{rank}") if marker_dir else None
        self._seen: set[str] = set()
        self._write("process started", _process_start())
        self._write("function entered", entered)

    def __call__(self, phase: str) -> None:
        if phase not in self._seen:
            self._seen.add(phase)
            self._write(phase, time.time())

    def _write(self, phase: str, at: float) -> None:
        if self._path is not None:
            with self._path.open("a") as f:
                f.write(f"{phase}\t{at!r}\n")


def read_timeline(marker_dir: Path, attempt: int, rank: int) -> dict[str, float]:
    """What `Timeline` wrote for one rank of one attempt: phase -> wall-clock time."""
    lines = (marker_dir / f"timeline-{attempt}-{rank}").read_text().splitlines()
    return {phase: float(at) for phase, at in (line.split("\t") for line in lines)}


def _process_start() -> float:
    """This process's start (fork or exec), on the wall clock: its start in clock ticks since boot, from /proc."""
    with open("/proc/self/stat", "rb") as f:
        raw = f.read()
    ticks = int(raw[raw.rindex(b")") + 2 :].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


class ExecutorHolder:
    """In the background: once ``kill`` exists, SIGKILL the executor JVM hosting rank 1 and SIGSTOP the JVM
    its worker starts in its place (before it registers); once ``small`` exists, SIGCONT it.

    With `worker_of` (an executor JVM's pid -> its host's Spark worker's pid), the worker is SIGSTOPped
    instead, just before the kill, so it starts no replacement until it is let go (SIGCONT)."""

    def __init__(
        self,
        marker_dir: Path,
        driver_url: str,
        seconds: float = 300,
        worker_of: Callable[[int], int] | None = None,
    ) -> None:
        self.killed_at: float | None = None
        self.released_at: float | None = None
        self.held: int | None = None
        self._dir, self._seconds, self._worker_of = marker_dir, seconds, worker_of
        self._driver_url = driver_url
        self._thread = threading.Thread(target=self._play, daemon=True)
        self._thread.start()

    def _executors(self) -> set[int]:
        found = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                line = _cmdline(int(pid))
            except OSError:
                continue
            if "CoarseGrainedExecutorBackend" in line and self._driver_url in line.split():
                found.add(int(pid))
        return found

    def _play(self) -> None:
        if not poll_until((self._dir / "kill").exists, self._seconds):
            return
        before, executor = self._executors(), executor_jvm_of(rank_pid(1))
        if self._worker_of is not None:
            self.held = self._worker_of(executor)
            os.kill(self.held, signal.SIGSTOP)
        os.kill(executor, signal.SIGKILL)
        self.killed_at = time.time()
        if self._worker_of is None:
            new = poll_until(lambda: self._executors() - before, self._seconds)
            if new:
                self.held = min(new)
                os.kill(self.held, signal.SIGSTOP)
        if poll_until((self._dir / "small").exists, self._seconds):
            self.release()

    def release(self) -> None:
        """Let the held executor go (safe to call again)."""
        if self.held is not None and self.released_at is None:
            self.released_at = time.time()
            os.kill(self.held, signal.SIGCONT)

    def join(self) -> None:
        self._thread.join(timeout=5)
        self.release()


_REFERENCE: dict[str, Any] = {}


def uninterrupted_run(data: ParquetData) -> dict[str, Any]:
    """The reference: 4 local ranks, no failure (direct launcher, np=-4); run once per test session, since
    `make_data` writes the same rows wherever it writes them."""
    from sparkrunner import Runner

    if not _REFERENCE:
        _REFERENCE.update(
            Runner(np=-4, launcher="direct", tracking=False, progress=False).run(elastic_fit, data)
        )
    return _REFERENCE


def assert_grew_back(runner: Any, result: dict[str, Any], reference: dict[str, Any]) -> None:
    """Attempts of 4, 2 and 4 ranks (a failure, then a rescale); every epoch trained on every row exactly once;
    each epoch's mean loss within `LOSS_TOLERANCE` (relative) of the uninterrupted `reference` run's."""
    import numpy as np

    attempts = runner.last_run.attempts
    assert [a.world_size for a in attempts] == [4, 2, 4]
    assert attempts[0].error is not None and attempts[1].rescaled and attempts[2].error is None
    assert [(a, w) for a, w, _ in result["ran"]] == [(0, 4), (1, 2), (2, 4)]
    assert np.array_equal(np.array(result["counts"]), np.ones((EPOCHS, ROWS))), (
        "every epoch must train on every row exactly once, across the resizes"
    )
    losses, expected = (np.array(r["losses"]).reshape(EPOCHS, -1).mean(1) for r in (result, reference))
    assert len(result["losses"]) == STEPS
    assert np.all(np.abs(losses - expected) <= LOSS_TOLERANCE * expected), (
        f"epoch mean losses {losses} differ from the uninterrupted run's {expected}"
    )
