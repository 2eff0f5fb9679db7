"""The main job: train a small torch classifier on scikit-learn's bundled digits data with Runner(np=2).

The training rows become a Spark DataFrame, materialized as Parquet; each rank reads only its shard through
sparkrunner's torch loader, with the same number of steps on every rank. Runs on a local Spark session (two barrier tasks), streams per-epoch progress from
the ranks, and prints the final test accuracy; sparkrunner's log says where its MLflow run is (the run's id, and
the tracking URI or the page on a tracking server). Nothing is downloaded: the digits data ships with scikit-learn.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def digits_frames(spark: Any) -> tuple[Any, Any, Any]:
    """The training split as a Spark DataFrame (pixels, label), and the held-out split as numpy arrays."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x / 16.0, y, test_size=0.25, random_state=0, stratify=y
    )
    rows = [(pixels.tolist(), int(label)) for pixels, label in zip(x_train, y_train, strict=True)]
    return spark.createDataFrame(rows, "pixels array<double>, label long"), x_test, y_test


def train(data: Any, x_test: Any, y_test: Any, epochs: int, lr: float, batch_size: int) -> dict[str, Any]:
    """One rank's training: DDP over gloo, each rank on its own shard of the materialized training set."""
    import torch
    import torch.distributed as dist

    from sparkrunner import log_to_driver, rank_context
    from sparkrunner.data import TorchLoader

    me = rank_context()
    dist.init_process_group("gloo")
    loader = TorchLoader(data, batch_size, seed=0)  # this rank's shard; len(loader) is equal on every rank
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    )
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for epoch in range(epochs):
        loader.set_epoch(epoch)  # a new shuffle every epoch, the same decisions on every rank
        total = torch.zeros(2)
        for batch in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(batch["pixels"]), batch["label"])
            loss.backward()
            opt.step()
            total += torch.tensor([loss.item(), 1.0])
        dist.all_reduce(total)
        if me.rank == 0:
            log_to_driver(
                f"epoch {epoch + 1}/{epochs}  mean loss {total[0] / total[1]:.4f}  ({len(loader)} steps)"
            )
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
    parser.add_argument(
        "--cache-dir", help="where materialized datasets are kept (default: sparkrunner's cache)"
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this environment's Python
    from pyspark.sql import SparkSession

    from sparkrunner import Runner
    from sparkrunner.data import materialize

    created = SparkSession.getActiveSession() is None  # stop only a session this job started
    spark = (
        SparkSession.builder.master(f"local[{max(args.np, 2)}]")
        .appName("sparkrunner-digits")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        frame, x_test, y_test = digits_frames(spark)
        data = materialize(frame, args.cache_dir)  # pixels become float32 arrays
        print(data)  # rows, columns, files, size and where it is
        try:
            result = Runner(np=args.np, spark=spark, driver_log_verbosity="log_callback_only").run(
                train, data, x_test, y_test, epochs=args.epochs, lr=args.lr, batch_size=args.batch_size
            )
        finally:
            data.delete()  # built from local rows, its cache entry is only valid in this Spark session
    finally:
        if created:
            spark.stop()
    print(f"test accuracy: {result['test_accuracy']:.3f} on {result['test_rows']} held-out digits")
    return 0 if result["test_accuracy"] > 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
