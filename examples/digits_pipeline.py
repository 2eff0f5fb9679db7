"""The main job (`make demo`): the whole workflow in Spark on scikit-learn's bundled digits data.

The rows are prepared in Spark (split, scaled by a Spark ML `StandardScaler`), a `sparkrunner.ml.TorchEstimator`
trains a torch classifier on two ranks of a barrier stage as the last stage of a Spark ML `Pipeline` (the rows
reach the ranks as Parquet written by the Spark tasks, never through the driver), each epoch's metrics go to a
local MLflow store, and the fitted pipeline scores the held-out rows on the executors; the accuracy is computed
in Spark. Nothing is downloaded: the digits data ships with scikit-learn.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

PIXELS = [f"p{i}" for i in range(64)]


def digits_frame(spark: Any) -> Any:
    """Every digit as a Spark row: its 64 pixels (one column each, as a table holds them) and its label."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    rows = [(*map(float, pixels), int(label)) for pixels, label in zip(x, y, strict=True)]
    return spark.createDataFrame(rows, [*PIXELS, "label"])


def pipeline(np: int, epochs: int, batch_size: int, lr: float) -> Any:
    """Pixel columns -> one ML vector -> scaled in Spark -> a small MLP trained with DDP on `np` ranks."""
    import torch
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import StandardScaler, VectorAssembler

    from sparkrunner.ml import TorchEstimator

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    estimator = TorchEstimator(
        model=net, optimizer=torch.optim.Adam(net.parameters(), lr=lr), loss="cross_entropy",
        feature_cols=["scaled"], label_cols=["label"], batch_size=batch_size, epochs=epochs, validation=0.1,
        np=np, launcher="direct",
    )  # fmt: skip
    to_vector = VectorAssembler(inputCols=PIXELS, outputCol="features")
    scaler = StandardScaler(inputCol="features", outputCol="scaled", withMean=True, withStd=True)
    return Pipeline(stages=[to_vector, scaler, estimator])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--np", type=int, default=2, help="ranks: > 0 on Spark, < 0 on the driver only")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this environment's Python
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.sql import SparkSession

    created = SparkSession.getActiveSession() is None  # stop only a session this job started
    spark = (
        SparkSession.builder.master(f"local[{max(args.np, 2)}]")
        .appName("sparkrunner-digits-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        train, test = digits_frame(spark).randomSplit([0.75, 0.25], seed=0)
        fitted = pipeline(args.np, args.epochs, args.batch_size, args.lr).fit(train)
        model = fitted.stages[-1]
        scored = fitted.transform(test)  # prediction and probability, computed on the executors
        evaluator = MulticlassClassificationEvaluator(labelCol="label", metricName="accuracy")
        accuracy = evaluator.evaluate(scored)
        rows = scored.count()
    finally:
        if created:
            spark.stop()
    history = model.history
    print(
        f"{len(history['loss'])} epochs: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, "
        f"validation accuracy {history['val_accuracy'][-1]:.3f}; MLflow run {model.mlflow_run_id}"
    )
    print(f"test accuracy: {accuracy:.3f} on {rows} held-out digits (scored on the executors)")
    return 0 if accuracy > 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
