"""Loads what tests/ml/test_persistence.py saved, in a process of its own (nothing of the saving process's
objects, classes or caches): a CrossValidatorModel and a TrainValidationSplitModel over a Pipeline ending in
TorchEstimator, unfitted Pipelines (SAVED/unfitted/NAME), and CrossValidatorModels over the other estimators
(SAVED/kinds/KIND), each of these where it was saved.

Usage: ``load_saved_stages.py SAVED``: prints "SCORES <json>" (each tuning model's best model scoring SAVED/test,
by id), "STAGE <name> <json>" (`tests.ml.saved_stages.fingerprint` of each loaded unfitted stage) and
"TUNED <kind> <json>" (the best model's class and scores of SAVED/kinds_test by id, the estimator's fingerprint and
the param maps' values)."""

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


def maps(tuned: Any) -> list[Any]:
    return sorted(v for m in tuned.getEstimatorParamMaps() for v in m.values())


if (SAVED / "cv").exists():
    test = spark.read.parquet(str(SAVED / "test"))
    scores: dict[str, Any] = {}
    for name, cls in (("cv", CrossValidatorModel), ("tvs", TrainValidationSplitModel)):
        tuned = cls.load(str(SAVED / name))
        rows = tuned.bestModel.transform(test).select("id", "prediction", "probability").collect()
        scores[name] = {str(r["id"]): [r["prediction"], list(r["probability"])] for r in rows}
        pipeline: Any = tuned.getEstimator()
        scores[f"{name}_estimator"] = fingerprint(pipeline.getStages()[-1])
        scores[f"{name}_maps"] = maps(tuned)
    print("SCORES", json.dumps(scores), flush=True)
for path in sorted((SAVED / "unfitted").iterdir()) if (SAVED / "unfitted").exists() else ():
    (stage,) = Pipeline.load(str(path)).getStages()
    print("STAGE", path.name, json.dumps(fingerprint(stage)), flush=True)
for path in sorted((SAVED / "kinds").iterdir()) if (SAVED / "kinds").exists() else ():
    tuned = CrossValidatorModel.load(str(path))
    best: Any = tuned.bestModel
    output = best.getOrDefault("prediction_col")
    rows = best.transform(spark.read.parquet(str(SAVED / "kinds_test"))).collect()
    found = {
        "scores": {str(r["id"]): r[output] for r in rows},
        "model": f"{type(best).__module__}.{type(best).__name__}",
        "estimator": fingerprint(tuned.getEstimator()),
        "maps": maps(tuned),
    }
    print("TUNED", path.name, json.dumps(found), flush=True)
spark.stop()
