"""Scoring from a plain Spark Connect client (test_connect_scoring.py): no JVM, no SparkContext, and pyspark
never switched into Connect mode, as a client built by ``pyspark.sql.connect`` alone is (pyspark.sql's builder
sets SPARK_CONNECT_MODE_ENABLED; without it, pyspark parses DDL strings through a classic session).

Usage: ``connect_scoring.py URL``: a `ScoringModel` of a torch classifier (its builder pickled into the UDF)
scores an array and a vector column on the server's executors; prints the worst difference to the same
module's forward pass and softmax computed here with torch, and whether the predicted classes agree."""

import os
import sys

import numpy as np
import torch
from pyspark import SparkContext
from pyspark.ml.connect.functions import array_to_vector
from pyspark.sql.connect import functions as F
from pyspark.sql.connect.session import SparkSession

from sparkrunner.ml import ScoringModel

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()  # pyspark.sql.connect's own builder

print(
    "PLAIN",
    "SPARK_CONNECT_MODE_ENABLED" not in os.environ,
    SparkContext._active_spark_context is None and SparkContext._jvm is None,
    flush=True,
)
torch.manual_seed(0)
net = torch.nn.Linear(5, 3)
frame = spark.range(0, 64, 1, 1).select(
    "id",
    F.array(*[F.rand(i).cast("float") for i in range(3)]).alias("x"),
    array_to_vector(F.array(F.rand(3), F.rand(4) * 4 - 2)).alias("v"),
)
scorer = ScoringModel(builder=lambda: net, feature_cols=["x", "v"], output_size=3, probability="softmax")
rows = scorer.transform(frame).collect()
features = torch.tensor([list(r["x"]) + list(r["v"]) for r in rows], dtype=torch.float32)
with torch.no_grad():
    local = torch.softmax(net(features), dim=1).numpy()
probabilities = np.array([r["probability"] for r in rows])
print("ROWS", len(rows), flush=True)
print("ERROR", float(np.abs(probabilities - local).max()), flush=True)
print("CLASSES", [r["prediction"] for r in rows] == local.argmax(axis=1).astype(float).tolist(), flush=True)
