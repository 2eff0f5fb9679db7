"""The main job: train a small torch classifier on scikit-learn's bundled digits data with Runner(np=2).

Runs on a local Spark session (two barrier tasks), streams per-epoch progress from the ranks, and prints
the final test accuracy. Nothing is downloaded: the digits data ships with scikit-learn.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def train(epochs: int, lr: float, batch_size: int) -> dict[str, Any]:
    """One rank's training: DDP over gloo, each rank on its half of the training set."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from sparkrunner import log_to_driver, rank_context

    me = rank_context()
    dist.init_process_group("gloo")
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x / 16.0, y, test_size=0.25, random_state=0, stratify=y
    )
    shard = np.arange(me.rank, len(x_train), me.world_size)
    xs = torch.tensor(x_train[shard], dtype=torch.float32)
    ys = torch.tensor(y_train[shard])
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    )
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    steps = len(shard) // batch_size  # the same on every rank: the shards differ by at most one row
    generator = torch.Generator().manual_seed(me.rank)
    for epoch in range(epochs):
        order = torch.randperm(len(xs), generator=generator)
        total = torch.zeros(2)
        for step in range(steps):
            idx = order[step * batch_size : (step + 1) * batch_size]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            total += torch.tensor([loss.item(), 1.0])
        dist.all_reduce(total)
        if me.rank == 0:
            log_to_driver(f"epoch {epoch + 1}/{epochs}  mean loss {total[0] / total[1]:.4f}")
    with torch.no_grad():
        predictions = model(torch.tensor(x_test, dtype=torch.float32)).argmax(dim=1).numpy()
    dist.destroy_process_group()
    return {"test_accuracy": float((predictions == y_test).mean()), "test_rows": len(y_test)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--np", type=int, default=2, help="ranks: > 0 on Spark, < 0 on the driver only")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this environment's Python
    from pyspark.sql import SparkSession

    from sparkrunner import Runner

    spark = None
    if args.np > 0:
        spark = (
            SparkSession.builder.master(f"local[{args.np}]")
            .appName("sparkrunner-digits")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
    try:
        result = Runner(np=args.np, driver_log_verbosity="log_callback_only").run(
            train, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size
        )
    finally:
        if spark is not None:
            spark.stop()
    print(f"test accuracy: {result['test_accuracy']:.3f} on {result['test_rows']} held-out digits")
    return 0 if result["test_accuracy"] > 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
