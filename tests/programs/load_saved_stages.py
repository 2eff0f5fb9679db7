"""Loads what tests/ml/test_persistence.py saved, in a process of its own (nothing of the saving process's
objects, classes or caches): a CrossValidatorModel and a TrainValidationSplitModel over a Pipeline ending in
TorchEstimator, and unfitted Pipelines (SAVED/unfitted/NAME).

Usage: ``load_saved_stages.py SAVED``: prints "SCORES <json>" (each tuning model's best model scoring SAVED/test,
by id) and "STAGE <name> <json>" (`tests.ml.saved_stages.fingerprint` of each loaded unfitted stage)."""

import json
import sys
from pathlib import Path
from typing import Any

from pyspark.ml import Pipeline
from pyspark.ml.tuning import CrossValidatorModel, TrainValidationSplitModel

from tests.conftest import spark_session
from tests.ml.saved_stages import fingerprint

SAVED = Path(sys.argv[1])
spark = spark_session("local[1]")
test = spark.read.parquet(str(SAVED / "test"))
scores: dict[str, Any] = {}
for name, cls in (("cv", CrossValidatorModel), ("tvs", TrainValidationSplitModel)):
    tuned = cls.load(str(SAVED / name))
    rows = tuned.bestModel.transform(test).select("id", "prediction", "probability").collect()
    scores[name] = {str(r["id"]): [r["prediction"], list(r["probability"])] for r in rows}
    pipeline: Any = tuned.getEstimator()
    scores[f"{name}_estimator"] = fingerprint(pipeline.getStages()[-1])
    scores[f"{name}_maps"] = sorted(v for m in tuned.getEstimatorParamMaps() for v in m.values())
print("SCORES", json.dumps(scores), flush=True)
for path in sorted((SAVED / "unfitted").iterdir()):
    (stage,) = Pipeline.load(str(path)).getStages()
    print("STAGE", path.name, json.dumps(fingerprint(stage)), flush=True)
spark.stop()
