"""Data with a known answer, and small torch models, for the estimator tests (shipped by value to the ranks
and the executors, as a notebook's would be)."""

from __future__ import annotations

import os
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
    y = sum(F.col("x")[i] * float(w) for i, w in enumerate(WEIGHTS)) + BIAS
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


class CrashOnce(torch.nn.Linear):
    """A linear model whose rank 1 dies (os._exit) at its `crash_after`+1-th training step of the first attempt,
    or, given a `marker` path, touches it there and waits to die with its executor (the test kills that JVM);
    every training step appends "attempt rank" to `log`."""

    def __init__(self, log: str, crash_after: int, marker: str = "") -> None:
        super().__init__(3, 1)
        self.log, self.crash_after, self.calls, self.marker = log, crash_after, 0, marker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from sparkrunner import rank_context

        context = rank_context()
        if self.training:
            with open(self.log, "a") as f:
                f.write(f"{context.attempt} {context.rank}\n")
            self.calls += 1
            if context.attempt == 0 and context.rank == 1 and self.calls > self.crash_after:
                if not self.marker:
                    os._exit(3)
                Path(self.marker).touch()
                time.sleep(300)  # the executor JVM's end ends this process long before
        return super().forward(x)


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
