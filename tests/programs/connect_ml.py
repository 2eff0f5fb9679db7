"""The estimators over Spark Connect (test_connect_ml.py), in one Connect server.

Usage: ``connect_ml.py URL TMP`` (URL: the Connect server's): TorchEstimator fitted on np<0 ranks from
materialized rows, one in the server's barrier stage from streamed rows, and transform on the server's executors;
an unfitted Pipeline and a PipelineModel of the first saved and loaded through the Connect session; then
FunctionEstimator (a barrier stage, materialized rows), scored on the executors, its worst error against the
generating function computed in Spark. Prints what the test checks."""

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pyspark.ml import Pipeline, PipelineModel
from pyspark.sql import SparkSession
from pyspark.sql.connect import functions as F

from sparkrunner.ml import FunctionEstimator, TorchEstimator
from tests.ml.nets import least_squares, linear_predict
from tests.ml.saved_stages import fingerprint

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
TMP = Path(sys.argv[2])
xs = [F.rand(i).cast("float") for i in range(3)]
frame = spark.range(0, 800, 1, 4).select("id", F.array(*xs).alias("x"))
frame = frame.withColumn(
    "y", (F.col("x")[0] * 2 - F.col("x")[1] * 3 + F.col("x")[2] * 0.5 + 1).cast("double")
)
COMMON: dict[str, Any] = dict(
    feature_cols=["x"], label_cols=["y"], batch_size=16, launcher="direct", store=str(TMP / "store"),
    tracking=False, verbose=0,
)  # fmt: skip


def estimator(np_: int, data: str, epochs: int) -> TorchEstimator:
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    return TorchEstimator(
        model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="mse", epochs=epochs,
        validation=0.25, np=np_, data=data, **COMMON,
    )  # fmt: skip


def worst_error(model: Any) -> float:
    """The largest |prediction - y| over the frame, scored on the server's executors and reduced in Spark."""
    scored = model.transform(frame)
    return float(scored.select(F.max(F.abs(F.col("prediction") - F.col("y")))).first()[0])


model = estimator(-2, "materialize", 20).fit(frame)
print("EPOCHS", len(model.history["loss"]), len(model.history["val_loss"]), flush=True)
rows = model.transform(frame).select("x", "y", "prediction").collect()
with torch.no_grad():
    local = model.getModel()(torch.tensor(np.array([r["x"] for r in rows], dtype=np.float32))).numpy()[:, 0]
predictions = np.array([r["prediction"] for r in rows])
print("SAME", bool(np.allclose(predictions, local, rtol=1e-5, atol=1e-5)), flush=True)
print("LEARNT", bool(np.abs(predictions - np.array([r["y"] for r in rows])).max() < 0.2), flush=True)
unfitted = estimator(-2, "materialize", 3)
Pipeline(stages=[unfitted]).write().save(str(TMP / "saved-unfitted"))  # through the Connect session's writers
stage: Any = Pipeline.load(str(TMP / "saved-unfitted")).getStages()[0]
PipelineModel(stages=[model]).write().save(str(TMP / "saved-fitted"))
again = (
    PipelineModel.load(str(TMP / "saved-fitted")).stages[0].transform(frame).select("prediction").collect()
)
print(
    "SAVED", type(stage).__name__, stage.getEpochs(), fingerprint(stage) == fingerprint(unfitted), flush=True
)
print("LOADED", [r["prediction"] for r in again] == list(predictions), flush=True)
streamed = estimator(1, "stream", 2).fit(frame)
print("STREAMED", len(streamed.history["loss"]), flush=True)

function = FunctionEstimator(train_fn=least_squares, predict_fn=linear_predict, np=2, **COMMON).fit(frame)
print("FUNCTION", function.getModel()[1], worst_error(function), flush=True)
