"""Data with a known answer, and small torch models, for the estimator tests (shipped by value to the ranks
and the executors, as a notebook's would be)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

WEIGHTS, BIAS = np.array([2.0, -3.0, 0.5]), 1.0


def linear_rows(spark: Any, rows: int, partitions: int = 4, seed: int = 0) -> Any:
    """x: array<float>[3] uniform in [0, 1), y = x . WEIGHTS + BIAS exactly (a linear model can fit it)."""
    from pyspark.sql import functions as F

    xs = [F.rand(seed + i).cast("float") for i in range(3)]
    frame = spark.range(0, rows, numPartitions=partitions).select("id", F.array(*xs).alias("x"))
    y = sum((F.col("x")[i] * float(w) for i, w in enumerate(WEIGHTS)), F.lit(BIAS))
    return frame.withColumn("y", y.cast("double"))


def class_rows(spark: Any, rows: int, partitions: int = 4) -> Any:
    """Two number columns a, b and label = 1 when a + b > 1 (else 0)."""
    from pyspark.sql import functions as F

    frame = spark.range(0, rows, numPartitions=partitions).select(
        "id", F.rand(11).alias("a"), F.rand(12).alias("b")
    )
    return frame.withColumn("label", (F.col("a") + F.col("b") > 1).cast("int"))


def classifier() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


class LoadLogged(torch.nn.Linear):
    """A linear model that appends this process's pid to `log` each time it is unpickled (loaded)."""

    def __init__(self, log: str) -> None:
        super().__init__(3, 1)
        self.log = log
        with torch.no_grad():
            self.weight.copy_(torch.from_numpy(WEIGHTS[None].astype(np.float32)))
            self.bias.fill_(BIAS)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")


def forward(model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(np.asarray(x, dtype=np.float32))).numpy()


class KillPoint:
    """Called at every training step: appends "attempt rank" to `log`; rank 1 of the first attempt, at its
    `crash_after`+1-th step, dies (os._exit) or, given a `marker` path, touches it and waits to die with its
    executor (the test kills that JVM). The steps are counted by the test, outside the code under test."""

    def __init__(self, log: str, crash_after: int, marker: str = "") -> None:
        self.log, self.crash_after, self.calls, self.marker = log, crash_after, 0, marker

    def step(self) -> None:
        from sparkrunner import rank_context

        context = rank_context()
        with open(self.log, "a") as f:
            f.write(f"{context.attempt} {context.rank}\n")
        self.calls += 1
        if context.attempt == 0 and context.rank == 1 and self.calls > self.crash_after:
            if not self.marker:
                os._exit(3)
            Path(self.marker).touch()
            time.sleep(300)  # the executor JVM's end ends this process long before


def steps_logged(log: Path) -> list[tuple[int, int]]:
    """The (attempt, rank) of every training step a `KillPoint` saw."""
    return [(int(a), int(r)) for a, r in (line.split() for line in log.read_text().splitlines())]


class CrashOnce(torch.nn.Linear):
    """A linear model whose every training step (forward pass in training mode) goes through `point`."""

    def __init__(self, point: KillPoint) -> None:
        super().__init__(3, 1)
        self.point = point

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.point.step()
        return super().forward(x)


class StuckOnRankOne(torch.nn.Linear):
    """Linear(3, 1) whose first training step on rank 1 never returns (it waits in `stuck_here`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import sparkrunner

        if self.training and sparkrunner.rank_context().rank == 1:
            self.stuck_here()
        return super().forward(x)

    def stuck_here(self) -> None:
        while True:
            time.sleep(60)


def least_squares(train: Any, val: Any) -> Any:
    """A `FunctionEstimator` train_fn: X^T X and X^T y of this rank's rows, summed over the ranks; rank 0 returns
    the solution and the rows of both splits it was given (0 without validation)."""
    import torch.distributed as dist

    from sparkrunner import rank_context
    from sparkrunner.data import NumpyLoader

    dist.init_process_group("gloo")
    gram, moment = torch.zeros(4, 4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    for batch in NumpyLoader(train, 50, shuffle=False):
        x = torch.from_numpy(np.hstack([batch["x"], np.ones((len(batch["x"]), 1))]).astype(np.float64))
        gram += x.T @ x
        moment += x.T @ torch.from_numpy(batch["y"].astype(np.float64))
    dist.all_reduce(gram)
    dist.all_reduce(moment)
    dist.destroy_process_group()
    if rank_context().rank != 0:
        return None
    return torch.linalg.solve(gram, moment).numpy(), train.num_rows, 0 if val is None else val.num_rows


def linear_predict(model: Any, x: np.ndarray) -> np.ndarray:
    """The `FunctionEstimator` predict_fn of `least_squares`."""
    weights = model[0]
    return x @ weights[:3] + weights[3]


class StepLogged(torch.optim.SGD):
    """SGD that appends its rank to `log` at every optimizer step (the steps counted outside the estimator)."""

    def __init__(self, params: Any, log: str) -> None:
        super().__init__(params, lr=0.01)
        self.log = log

    def step(self, closure: Any = None) -> Any:
        from sparkrunner import rank_context

        with open(self.log, "a") as f:
            f.write(f"{rank_context().rank}\n")
        return super().step(closure)


class TwoInputs(torch.nn.Module):
    """Horovod's input contract: ``forward(x, s)`` gets one tensor per feature column in its `input_shapes`
    (x: ``(rows, 3, 1)``, s: ``(rows, 1)``) and refuses any other shape; it fits ``x . WEIGHTS + BIAS + 2 s``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.x = torch.nn.Linear(3, 1)
        self.s = torch.nn.Linear(1, 1, bias=False)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[1:]) != (3, 1) or tuple(s.shape[1:]) != (1,):
            raise ValueError(f"forward got shapes {tuple(x.shape)} and {tuple(s.shape)}")
        return self.x(x.reshape(len(x), 3)) + self.s(s)


class BatchLogged(torch.nn.Linear):
    """A linear model of 3 inputs that appends each forward pass's mode and rows (``train 8``, ``eval 4``) to
    `log`: the batches the ranks fed it, counted outside the estimator."""

    def __init__(self, log: str) -> None:
        super().__init__(3, 1)
        self.log = log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with open(self.log, "a") as f:
            f.write(f"{'train' if self.training else 'eval'} {len(x)}\n")
        return super().forward(x)


def squared_error(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """A metric function (Horovod's form): the batch's mean squared error. Over batches of one size, its mean
    over batches and ranks is the mean over rows that the "mse" loss reports."""
    return ((outputs - labels.reshape(outputs.shape)) ** 2).mean()


class LockedMSE(torch.nn.MSELoss):
    """An MSE loss that holds a lock, so it cannot be pickled: Horovod's `loss_constructors` build such a loss
    in each rank."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
