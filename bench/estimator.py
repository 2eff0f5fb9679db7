"""Seconds of a whole `fit` (data written for the ranks, launch, training, the fitted model back): sparkrunner's
`TorchEstimator` against pyspark's `TorchDistributor` with hand-written data loading (the DataFrame written as
Parquet, each rank reading its rows with pyarrow and training DDP), on the same model (bench/inference.py's
MLP), DataFrame, epochs, batch size and np; and Horovod's own `horovod.spark.torch.TorchEstimator` where it can
run (it needs Petastorm), else the reason it cannot, printed. Each fit writes its data anew (a fresh store /
path), as a first fit would; one warm-up fit each, then `--repeats`, taking turns; medians.

With `--keras`, the same MLP in Keras: sparkrunner's `KerasEstimator` with a Keras 3 model on np ranks (Keras'
torch backend, gradients averaged over gloo) against the best single-host alternative (one process,
`tf.distribute.MirroredStrategy` over the same cores, reading the same Parquet, global batch np x batch) and
against sparkrunner's `KerasEstimator` with a tf_keras model under `MultiWorkerMirroredStrategy`.

    PYTHONPATH=$PWD .venv/bin/python -m bench.estimator [--rows 200000] [--epochs 2] [--repeats 3] [--keras]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench.inference import MLP, frame
from bench.spark_session import checkout_on_pythonpath, quiet_session

NP = 2


def ours(df: Any, store: Path, epochs: int, batch_size: int) -> None:
    """sparkrunner's estimator, MLflow off (the peers log nothing either)."""
    from sparkrunner.ml import TorchEstimator

    TorchEstimator(
        model=MLP(), loss="cross_entropy", feature_cols=["x"], label_cols=["y"], batch_size=batch_size,
        epochs=epochs, np=NP, launcher="direct", store=str(store), tracking=False, verbose=0, shuffle=False,
    ).fit(df)  # fmt: skip


def distributor(df: Any, store: Path, epochs: int, batch_size: int) -> None:
    """TorchDistributor, the data loading written by hand as a user would: Parquet, then each rank's rows."""
    from pyspark.ml.torch.distributor import TorchDistributor

    df.write.parquet(str(store))
    TorchDistributor(num_processes=NP, local_mode=False, use_gpu=False).run(
        hand_written_train, str(store), epochs, batch_size
    )


def hand_written_train(path: str, epochs: int, batch_size: int) -> Any:
    """DDP over Gloo on this rank's rows (every world_size-th, equal counts so no rank waits in allreduce)."""
    import numpy as np
    import pyarrow.dataset as ds
    import torch
    import torch.distributed as dist

    from bench.inference import MLP

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    table = ds.dataset(path, format="parquet").to_table(columns=["x", "y"])
    count = table.num_rows // world
    x = np.asarray(table.column("x").combine_chunks().flatten(), dtype=np.float32).reshape(table.num_rows, -1)
    y = table.column("y").to_numpy()
    xs = torch.from_numpy(x[rank::world][:count].copy())
    ys = torch.from_numpy(y[rank::world][:count].copy())
    model = torch.nn.parallel.DistributedDataParallel(MLP())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(epochs):
        for i in range(0, count - batch_size + 1, batch_size):
            optimizer.zero_grad()
            loss_fn(model(xs[i : i + batch_size]), ys[i : i + batch_size]).backward()
            optimizer.step()
    state = model.module.state_dict() if rank == 0 else None
    dist.destroy_process_group()
    return state


def keras_mlp(keras: Any) -> Any:
    """bench.inference's MLP in `keras` (Keras 3 or tf_keras), seeded."""
    from bench.inference import CLASSES, WIDTH

    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input(shape=(WIDTH,)), keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"), keras.layers.Dense(CLASSES),
        ]
    )  # fmt: skip


def _keras_estimator(keras: Any, df: Any, store: Path, epochs: int, batch_size: int) -> None:
    from sparkrunner.ml import KerasEstimator

    KerasEstimator(
        model=keras_mlp(keras), optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), feature_cols=["x"], label_cols=["y"],
        batch_size=batch_size, epochs=epochs, np=NP, launcher="direct", store=str(store), tracking=False,
        verbose=0, shuffle=False,
    ).fit(df)  # fmt: skip


def keras3_ranks(df: Any, store: Path, epochs: int, batch_size: int) -> None:
    """sparkrunner's KerasEstimator, a Keras 3 model: Keras' torch backend on NP ranks."""
    import keras

    _keras_estimator(keras, df, store, epochs, batch_size)


def tf_keras_ranks(df: Any, store: Path, epochs: int, batch_size: int) -> None:
    """sparkrunner's KerasEstimator, a tf_keras model: MultiWorkerMirroredStrategy on NP ranks."""
    import tf_keras

    _keras_estimator(tf_keras, df, store, epochs, batch_size)


def mirrored_one_process(df: Any, store: Path, epochs: int, batch_size: int) -> None:
    """The single-host alternative: the rows as Parquet, read into this process, Keras 3's fit under
    MirroredStrategy (every core of the machine in one process), global batch NP x batch_size."""
    import keras
    import numpy as np
    import pyarrow.dataset as ds
    import tensorflow as tf

    df.write.parquet(str(store))
    table = ds.dataset(str(store), format="parquet").to_table(columns=["x", "y"])
    x = np.asarray(table.column("x").combine_chunks().flatten(), np.float32).reshape(table.num_rows, -1)
    y = table.column("y").to_numpy()
    with tf.distribute.MirroredStrategy().scope():
        model = keras_mlp(keras)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=NP * batch_size, epochs=epochs, shuffle=False, verbose=0)


KERAS_CONTENDERS = {
    "sparkrunner KerasEstimator, Keras 3": keras3_ranks,
    "one process, MirroredStrategy, Keras 3": mirrored_one_process,
    "sparkrunner KerasEstimator, tf_keras MWMS": tf_keras_ranks,
}


def horovod_estimator(df: Any, store: Path, epochs: int, batch_size: int) -> None:
    """Horovod's own TorchEstimator with a LocalStore (it reads through Petastorm)."""
    import torch
    from horovod.spark.common.store import LocalStore
    from horovod.spark.torch import TorchEstimator

    model = MLP()
    TorchEstimator(
        num_proc=NP, store=LocalStore(str(store)), model=model,
        optimizer=torch.optim.Adam(model.parameters(), lr=1e-3), loss=torch.nn.CrossEntropyLoss(),
        feature_cols=["x"], label_cols=["y"], batch_size=batch_size, epochs=epochs, verbose=0,
    ).fit(df)  # fmt: skip


def horovod_unavailable() -> str | None:
    """Why Horovod's Spark estimator cannot run in this interpreter (None when it and Petastorm import)."""
    import importlib

    failures = []
    for module in ("petastorm", "horovod.spark.torch"):
        try:
            importlib.import_module(module)
        except Exception as error:  # any import failure is the answer, reported as is
            failures.append(
                f"import {module}: {traceback.format_exception_only(type(error), error)[-1].strip()}"
            )
    if not failures:
        return None
    return (
        "; ".join(failures) + ". Petastorm needs pyarrow < 15 and numpy < 2 (here: pyarrow "
        f"{_version('pyarrow')}, numpy {_version('numpy')}); the pinned .venv-petastorm has neither pyspark nor Horovod"
    )


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default=f"local[{NP}]")
    parser.add_argument("--keras", action="store_true", help="the Keras contenders instead of the torch ones")
    args = parser.parse_args()
    checkout_on_pythonpath()
    spark = quiet_session(args.master)
    df = frame(spark, args.rows, 2 * NP, label=True).persist()
    df.count()
    contenders = {"sparkrunner TorchEstimator": ours, "TorchDistributor + hand-written loading": distributor}
    why_not = None if args.keras else horovod_unavailable()
    if args.keras:
        contenders = dict(KERAS_CONTENDERS)
    elif why_not is None:
        contenders["horovod.spark.torch.TorchEstimator"] = horovod_estimator
    times: dict[str, list[float]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory(prefix="sparkrunner-bench-estimator-") as tmp:
        for turn in range(args.repeats + 1):  # turn 0: the warm-up, not counted
            for name, fit in contenders.items():
                start = time.perf_counter()
                fit(df, Path(tmp) / f"{len(times[name])}-{turn}-{hash(name)}", args.epochs, args.batch_size)
                if turn:
                    times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians[next(iter(contenders))]
    print(
        f"fit, MLP, {args.rows:,} rows, {args.epochs} epochs, batch {args.batch_size}, np={NP}, {args.master}"
    )
    for name, seconds in medians.items():
        print(f"  {name:42s} {seconds:7.2f} s   x {seconds / base:4.2f} of {next(iter(contenders))}")
    if why_not is not None:
        print(f"  horovod.spark.torch.TorchEstimator         cannot run here: {why_not}")
    print(f"repeats {args.repeats}, load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
