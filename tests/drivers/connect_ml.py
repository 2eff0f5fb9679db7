"""TorchEstimator and TorchModel over Spark Connect (test_connect_ml.py).

Usage: ``connect_ml.py TMP``: a fit on np<0 ranks from materialized rows, one in the server's barrier stage
from streamed rows, and transform on the server's executors; prints what the test checks."""

import sys
from pathlib import Path

import numpy as np
import torch
from pyspark.sql.connect import functions as F

from sparkrunner.ml import TorchEstimator
from tests.scenarios.connect.server import start_connect_session

TMP = Path(sys.argv[1])
server, spark = start_connect_session()
xs = [F.rand(i).cast("float") for i in range(3)]
frame = spark.range(0, 800, 1, 4).select("id", F.array(*xs).alias("x"))
frame = frame.withColumn(
    "y", (F.col("x")[0] * 2 - F.col("x")[1] * 3 + F.col("x")[2] * 0.5 + 1).cast("double")
)


def estimator(np_: int, data: str, epochs: int) -> TorchEstimator:
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    return TorchEstimator(
        model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="mse", feature_cols=["x"],
        label_cols=["y"], batch_size=16, epochs=epochs, validation=0.25, np=np_, launcher="direct", data=data,
        store=str(TMP / "store"), tracking=False, verbose=0,
    )  # fmt: skip


model = estimator(-2, "materialize", 20).fit(frame)
print("EPOCHS", len(model.history["loss"]), len(model.history["val_loss"]), flush=True)
rows = model.transform(frame).select("x", "y", "prediction").collect()
with torch.no_grad():
    local = model.getModel()(torch.tensor(np.array([r["x"] for r in rows], dtype=np.float32))).numpy()[:, 0]
predictions = np.array([r["prediction"] for r in rows])
print("SAME", bool(np.allclose(predictions, local, rtol=1e-5, atol=1e-5)), flush=True)
print("LEARNT", bool(np.abs(predictions - np.array([r["y"] for r in rows])).max() < 0.2), flush=True)
streamed = estimator(1, "stream", 2).fit(frame)
print("STREAMED", len(streamed.history["loss"]), flush=True)
