"""Rows/s of scoring a DataFrame on the executors: sparkrunner's `TorchModel.transform` (a fitted model),
`ScoringModel(model_uri=...)` (the same model, logged in MLflow by the fit) and `mlflow.pyfunc.spark_udf` on that
logged model (its pyfunc is sparkrunner's, `sparkrunner_pyfunc`) against `pyspark.ml.functions.predict_batch_udf`
and a hand-written `mapInPandas` that rebuilds the network from a broadcast `state_dict` in every partition (what
notebooks/04 did before). Same model, same persisted DataFrame (64 float features per row), same batch size; an
MLP and a small CNN. Targets: `transform` and `ScoringModel` >= 1.5x the best peer, `spark_udf` >= 0.8x
`predict_batch_udf`. Then the logged model behind ``mlflow models serve`` (--env-manager local): the median
request time of 1 and 1,000 rows.

Each contender's output is computed in full (`write.format("noop")`): one warm-up pass each, then `--repeats`
rounds in which every contender makes one timed pass in turn (interleaved: the machine's load moves all alike);
rows/s from each one's median. Every load of a model in any process (built or unpickled) appends its pid to a
file: the loads in each contender's warm-up pass and the Python workers that did them are counted outside the
code measured. Torch threads are not pinned by any contender: Spark's Python workers run with
OMP_NUM_THREADS = spark.task.cpus (1 here), for ours and the peers alike.

    PYTHONPATH=$PWD .venv/bin/python -m bench.inference [--rows 1000000] [--repeats 3] [--models mlp cnn]
        [--only LABEL ...] [--no-serve]

`--device cuda` scores on the GPU(s): the session's tasks share each GPU (a local-cluster master; Spark's GPU
scheduling with an nvidia-smi discovery script), ours place the model on the task's GPU, the peers' functions
move their network and batches to "cuda", and MLflow's pyfunc loads its torch model there (`model_config`).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from bench import model_serve
from bench.spark_session import checkout_on_pythonpath, gpu_conf, quiet_session
from bench.timing import interleaved

WIDTH = 64
CLASSES = 10
LOADS = "SPARKRUNNER_BENCH_LOADS"
"""The file every model load appends its pid to (set before Spark starts: the Python workers inherit it)."""
SPARK_UDF = "sparkrunner_pyfunc via mlflow.pyfunc.spark_udf"
BATCH_UDF = "predict_batch_udf"


def count_load() -> None:
    """Append this process's pid to the load file: one line per model built or unpickled."""
    path = os.environ.get(LOADS)
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")


class Counted(torch.nn.Module):
    """A module that counts each time a process builds it or unpickles it."""

    def __init__(self) -> None:
        super().__init__()
        count_load()

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        count_load()


class MLP(Counted):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(WIDTH, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
            torch.nn.Linear(256, CLASSES),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CNN(Counted):
    """8x8 one-channel images, as 64 features a row."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3, padding=1),
            torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(16 * 4 * 4, CLASSES),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.reshape(-1, 1, 8, 8))


MODELS: dict[str, type[Counted]] = {"mlp": MLP, "cnn": CNN}


def frame(spark: Any, rows: int, partitions: int, label: bool = False) -> Any:
    """`rows` rows of `WIDTH` seeded random floats in column ``x`` (and a class ``y`` when `label`)."""
    from pyspark.sql import functions as F

    df = spark.range(rows, numPartitions=partitions)
    df = df.select(F.array(*[F.rand(i) for i in range(WIDTH)]).cast("array<float>").alias("x"))
    return df.withColumn("y", F.floor(F.rand(WIDTH) * CLASSES).cast("long")) if label else df


def fitted(spark: Any, name: str, batch_size: int) -> Any:
    """A `TorchModel` fitted for one epoch on 2,000 rows (np=-1): the model every contender scores."""
    from sparkrunner.ml import TorchEstimator

    estimator = TorchEstimator(
        model=MODELS[name](), loss="cross_entropy", feature_cols=["x"], label_cols=["y"],
        batch_size=batch_size, epochs=1, np=-1, launcher="direct", verbose=0,
    )  # fmt: skip
    return estimator.fit(frame(spark, 2000, 2, label=True))


def contenders(
    spark: Any, model: Any, name: str, batch_size: int, device: str
) -> dict[str, Callable[[Any], Any]]:
    """Each contender: a function from the DataFrame to the scored DataFrame; the peers compute on `device`."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, FloatType

    from sparkrunner.ml import ScoringModel

    state = spark.sparkContext.broadcast(model.getModel().state_dict())
    cls = MODELS[name]

    def make_predict_fn() -> Callable[[Any], Any]:
        net = cls()
        net.load_state_dict(state.value)
        net.eval().to(device)

        def predict(x: Any) -> Any:
            with torch.no_grad():
                return net(torch.from_numpy(x).to(device)).cpu().numpy()

        return predict

    def map_in_pandas(frames: Iterator[Any]) -> Iterator[Any]:
        import numpy as np
        import pandas as pd

        net = cls()  # the notebook's shape: the network rebuilt from the broadcast in every partition
        net.load_state_dict(state.value)
        net.eval().to(device)
        for pdf in frames:
            x = np.stack(pdf["x"].to_numpy()).astype(np.float32)
            with torch.no_grad():
                out = net(torch.from_numpy(x).to(device)).cpu().numpy()
            yield pd.DataFrame({"prediction": list(out)})

    ours_uri = ScoringModel(
        model_uri=model.mlflow_model_uri, feature_cols=["x"], batch_size=batch_size, output_size=CLASSES,
        probability="softmax",
    )  # fmt: skip
    batch_udf = predict_batch_udf(
        make_predict_fn,
        return_type=ArrayType(FloatType()),
        batch_size=batch_size,
        input_tensor_shapes=[[WIDTH]],
    )
    pyfunc_udf = _pyfunc_udf(spark, model.mlflow_model_uri, device)
    return {
        "sparkrunner TorchModel.transform": model.transform,
        "sparkrunner ScoringModel(model_uri)": ours_uri.transform,
        SPARK_UDF: lambda df: df.withColumn("prediction", pyfunc_udf(F.col("x"))),
        BATCH_UDF: lambda df: df.withColumn("prediction", batch_udf("x")),
        "mapInPandas + broadcast state_dict": lambda df: df.mapInPandas(
            map_in_pandas, "prediction array<float>"
        ),
    }


def _pyfunc_udf(spark: Any, uri: str, device: str) -> Any:
    import mlflow.pyfunc
    from pyspark.sql.types import ArrayType, FloatType

    return mlflow.pyfunc.spark_udf(
        spark, uri, result_type=ArrayType(FloatType()), env_manager="local", model_config={"device": device}
    )


def loads(path: Path) -> tuple[int, int]:
    """(model loads, distinct processes that loaded) recorded in the load file since it was emptied."""
    pids = path.read_text().split() if path.exists() else []
    return len(pids), len(set(pids))


def measure(
    df: Any, scorers: dict[str, Callable[[Any], Any]], repeats: int, load_file: Path
) -> dict[str, tuple[float, int, int]]:
    """{label: (median seconds of a full pass, model loads in its warm-up pass, processes that loaded)}: each
    contender's warm-up pass in turn, then `repeats` rounds of one timed pass each."""
    passes = {label: _full_pass(score(df)) for label, score in scorers.items()}
    warm = {}
    for label, run in passes.items():
        load_file.write_text("")
        run()
        warm[label] = loads(load_file)
    times = interleaved(passes, repeats)
    return {label: (statistics.median(times[label]), *warm[label]) for label in passes}


def _full_pass(out: Any) -> Callable[[], None]:
    return lambda: out.write.format("noop").mode("overwrite").save()


def python_workers(spark: Any) -> int:
    """Distinct Python worker processes that run this session's tasks (a pass that reports its pid)."""
    rows = spark.range(64, numPartitions=16).mapInPandas(_pid, "pid long").distinct().collect()
    return len(rows)


def _pid(frames: Iterator[Any]) -> Iterator[Any]:
    import pandas as pd

    for _ in frames:
        pass
    yield pd.DataFrame({"pid": [os.getpid()]})


def report(name: str, rows: int, results: dict[str, tuple[float, int, int]], workers: int) -> list[str]:
    """The table of one model: rows/s, loads in the warm-up pass, loading processes; ours / the best peer, and
    `spark_udf` / `predict_batch_udf`."""
    lines = [f"{name}: {rows:,} rows, Python workers {workers}; loads: in each one's warm-up pass"]
    rates = {label: rows / seconds for label, (seconds, _, _) in results.items()}
    for label, (_, count, processes) in results.items():
        lines.append(
            f"  {label:52s} {rates[label]:11,.0f} rows/s   loads {count:4d} in {processes} processes"
        )
    peers = [(r, label) for label, r in rates.items() if not label.startswith("sparkrunner")]
    ours = [label for label in rates if label.startswith("sparkrunner") and label != SPARK_UDF]
    if peers:
        best = max(peers)
        for label in ours:
            lines.append(f"  {label} / best peer ({best[1]}): {rates[label] / best[0]:.2f}x (target >= 1.5x)")
    if SPARK_UDF in rates and BATCH_UDF in rates:
        lines.append(
            f"  spark_udf / predict_batch_udf: {rates[SPARK_UDF] / rates[BATCH_UDF]:.2f}x (target >= 0.8x)"
        )
    return lines


def shared_gpu(master: str) -> int:
    """How many tasks share each GPU: every task slot of the local-cluster `master`'s executor, spread over its
    GPUs (Spark schedules GPUs through a cluster manager; local mode does not)."""
    match = re.fullmatch(r"local-cluster\[\d+,\s*(\d+),\s*\d+\]", master)
    gpus = torch.cuda.device_count()
    if match is None or gpus == 0:
        raise SystemExit(
            f"--device cuda needs a GPU torch sees and a local-cluster[N,cores,MB] master, not {master}"
        )
    return max(1, int(match.group(1)) // gpus)


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--master", help="default local[2]; local-cluster[1,4,8192] with --device cuda")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["mlp", "cnn"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--only", action="append", help="time only this contender (repeatable; its label)")
    parser.add_argument("--no-serve", action="store_true", help="skip the `mlflow models serve` requests")
    args = parser.parse_args(argv)
    args.master = args.master or ("local-cluster[1,4,8192]" if args.device == "cuda" else "local[2]")
    with tempfile.TemporaryDirectory(prefix="sparkrunner-bench-inference-") as tmp:
        load_file = Path(tmp) / "loads"
        os.environ[LOADS] = str(load_file)  # before Spark starts: its Python workers inherit it
        checkout_on_pythonpath()
        os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{tmp}/mlflow.db")
        conf = (
            gpu_conf(tmp, torch.cuda.device_count(), shared_gpu(args.master)) if args.device == "cuda" else {}
        )
        spark = quiet_session(args.master, **conf)
        df = frame(spark, args.rows, args.partitions).persist()
        df.count()
        lines = []
        for name in args.models:
            model = fitted(spark, name, args.batch_size)
            scorers = contenders(spark, model, name, args.batch_size, args.device)
            scorers = {k: v for k, v in scorers.items() if not args.only or k in args.only}
            lines += report(
                name, args.rows, measure(df, scorers, args.repeats, load_file), python_workers(spark)
            )
            if not args.no_serve:
                served = model_serve.request_ms(model.mlflow_model_uri, WIDTH)
                lines.append(
                    "  mlflow models serve (the logged model, --env-manager local, 1 worker): "
                    + ", ".join(f"{n:,} rows {ms:.1f} ms" for n, ms in served.items())
                    + " a request (median of 20)"
                )
        lines.append(f"master {args.master}, device {args.device}, {args.partitions} partitions, "
                     f"batch {args.batch_size}, repeats {args.repeats}, load average {os.getloadavg()}")  # fmt: skip
        print("\n".join(lines), file=sys.stdout, flush=True)
        df.unpersist()
        return lines


if __name__ == "__main__":
    main()
