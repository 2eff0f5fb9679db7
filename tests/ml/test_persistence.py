"""Saving fitted models (real Spark writers, real files) and fitting as the last stage of a Spark ML Pipeline:
a loaded model, alone or inside a loaded PipelineModel, scores exactly as the one that was saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sparkrunner.ml import TorchEstimator, TorchModel
from tests.ml.nets import class_rows, classifier, forward

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def scores(frame: Any, *columns: str) -> list[tuple[Any, ...]]:
    return [tuple(row[c] for c in columns) for row in frame.orderBy("id").collect()]


def test_a_pipeline_ending_in_the_estimator_fits_saves_and_loads(
    spark_ml: Any, store: Path, tracking_uri: str, tmp_path: Path
) -> None:
    """np=-1, launcher "direct": what is saved and loaded does not depend on the number of ranks (DDP fits are
    tests/ml/test_torch_estimator.py's)."""
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import StandardScaler, VectorAssembler

    net = classifier()
    pipeline = Pipeline(
        stages=[
            VectorAssembler(inputCols=["a", "b"], outputCol="features"),
            StandardScaler(inputCol="features", outputCol="scaled", withMean=True),
            TorchEstimator(
                model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="cross_entropy",
                feature_cols=["scaled"], label_cols=["label"], batch_size=32, epochs=6, np=-1,
                launcher="direct", store=str(store), tracking=tracking_uri, verbose=0, run_id="pipeline-test",
            ),
        ]
    )  # fmt: skip
    fitted = pipeline.fit(class_rows(spark_ml, 1200))
    test = class_rows(spark_ml, 200, partitions=2)
    before = scores(fitted.transform(test), "prediction", "probability")

    torch_model = fitted.stages[-1]
    assert isinstance(torch_model, TorchModel) and torch_model.run_id == "pipeline-test"
    scaled = fitted.transform(test).orderBy("id").select("scaled").collect()
    local = torch.softmax(
        torch.from_numpy(forward(torch_model.getModel(), [r["scaled"].toArray() for r in scaled])), 1
    )
    np.testing.assert_allclose([p for _, p in before], local.numpy(), rtol=1e-5, atol=1e-6)
    assert (
        np.mean([p == r["label"] for (p, _), r in zip(before, test.orderBy("id").collect(), strict=True)])
        > 0.9
    )

    fitted.write().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[-1], TorchModel)
    assert loaded.stages[-1].history == torch_model.history
    assert loaded.stages[-1].mlflow_run_id == torch_model.mlflow_run_id
    assert scores(loaded.transform(test), "prediction", "probability") == before

    torch_model.write().overwrite().save(str(tmp_path / "model"))
    alone = TorchModel.load(str(tmp_path / "model"))
    assert alone.getFeatureCols() == ["scaled"] and alone.getBatchSize() == 32
    assert scores(
        alone.transform(fitted.stages[1].transform(fitted.stages[0].transform(test))), "prediction"
    ) == [(p,) for p, _ in before]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the two tuning tests below save what one new driver process loads."""
    return tmp_path_factory.mktemp("saved")


@pytest.fixture(scope="module")
def torch_tuned(spark_ml: Any, store: Path, saved: Path) -> tuple[Any, Any]:
    """A real CrossValidator (2 folds x 2 param maps: five fits) over a Pipeline ending in TorchEstimator, saved
    with a TrainValidationSplitModel of the same estimator, param maps and best model, the unfitted Pipeline and
    the rows to score: the fitted CrossValidatorModel and the estimator."""
    from pyspark.ml import Pipeline
    from pyspark.ml.evaluation import MulticlassClassificationEvaluator
    from pyspark.ml.feature import VectorAssembler
    from pyspark.ml.tuning import CrossValidator, ParamGridBuilder, TrainValidationSplitModel

    net = classifier()
    estimator = TorchEstimator(
        model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="cross_entropy",
        feature_cols=["features"], label_cols=["label"], batch_size=32, np=-1, launcher="direct",
        store=str(store), tracking=False, verbose=0,
    )  # fmt: skip
    pipeline = Pipeline(stages=[VectorAssembler(inputCols=["a", "b"], outputCol="features"), estimator])
    grid = ParamGridBuilder().addGrid(estimator.epochs, [1, 4]).build()
    evaluator = MulticlassClassificationEvaluator(labelCol="label", metricName="accuracy")
    cv = CrossValidator(
        estimator=pipeline, estimatorParamMaps=grid, evaluator=evaluator, numFolds=2, seed=3
    ).fit(class_rows(spark_ml, 400))
    tvs = TrainValidationSplitModel(cv.bestModel, cv.avgMetrics)
    tvs._set(estimator=pipeline, estimatorParamMaps=grid, evaluator=evaluator)

    class_rows(spark_ml, 100, partitions=2).write.parquet(str(saved / "test"))
    cv.write().save(str(saved / "cv"))
    tvs.write().save(str(saved / "tvs"))
    Pipeline(stages=[estimator]).write().save(str(saved / "unfitted" / "torch"))
    return cv, estimator


@pytest.fixture(scope="module")
def keras_tuned(spark_ml: Any, store: Path, saved: Path) -> dict[str, Any]:
    """A CrossValidatorModel over KerasEstimator (one fit) saved with the rows to score: what the new process
    must find (the fitted model's scores of those rows here, its class, the estimator's fingerprint)."""
    from pyspark.ml.evaluation import RegressionEvaluator
    from pyspark.ml.tuning import CrossValidatorModel, ParamGridBuilder

    from tests.ml.nets import linear_rows
    from tests.ml.saved_stages import fingerprint, unfitted

    linear_rows(spark_ml, 32, partitions=2, seed=7).write.parquet(str(saved / "kinds_test"))
    test, train = spark_ml.read.parquet(str(saved / "kinds_test")), linear_rows(spark_ml, 64, partitions=2)
    stage = unfitted()["keras"]
    estimator = stage.copy(
        {stage.getParam(n): v for n, v in (("np", -1), ("launcher", "direct"), ("epochs", 1),
                                          ("store", str(store)))}
    )  # fmt: skip
    fitted = estimator.fit(train)
    output = fitted.getOrDefault("prediction_col")
    rows = fitted.transform(test).collect()
    here = {str(r["id"]): r[output] for r in rows}
    rmse = float(np.sqrt(np.mean([(r[output] - r["y"]) ** 2 for r in rows])))  # the evaluator's metric
    cv = CrossValidatorModel(fitted, [rmse])
    grid = ParamGridBuilder().addGrid(estimator.getParam("epochs"), [1]).build()
    evaluator = RegressionEvaluator(labelCol="y", predictionCol=output, metricName="rmse")
    cv._set(estimator=estimator, estimatorParamMaps=grid, evaluator=evaluator)
    cv.write().save(str(saved / "kinds" / "keras"))
    return {
        "scores": here,
        "model": f"{type(fitted).__module__}.{type(fitted).__name__}",
        "estimator": fingerprint(estimator),
    }


@pytest.fixture(scope="module")
def loaded_elsewhere(torch_tuned: Any, keras_tuned: Any, saved: Path) -> str:
    """What one new driver process (tests/programs/load_saved_stages.py) printed, having loaded everything both
    tuning tests saved: a process start, a JVM start and the torch and TensorFlow imports paid once for both."""
    from tests.helpers import run_driver

    return run_driver("load_saved_stages", str(saved), seconds=300)


# five fits, a Keras fit (the next test's) and a new driver process: ~3 min when the machine is idle
@pytest.mark.timeout(900)
def test_tuning_models_save_and_load_in_a_new_process(
    spark_ml: Any, torch_tuned: tuple[Any, Any], saved: Path, loaded_elsewhere: str
) -> None:
    """A real CrossValidator (2 folds x 2 param maps, np=-1, launcher "direct") over a Pipeline ending in
    TorchEstimator; a TrainValidationSplitModel of the same estimator, param maps and best model (what its
    writer writes: a TrainValidationSplit fit would train three times more for nothing new to save), and the
    unfitted Pipeline. A new process loads them: the best models score as here, and the loaded estimators hold
    what was saved (the optimizer still optimizing the loaded model's parameters)."""
    from tests.ml.saved_stages import fingerprint

    cv, estimator = torch_tuned
    assert cv.avgMetrics[1] > cv.avgMetrics[0]  # four epochs learn more than one
    out = loaded_elsewhere
    printed = [line.split(" ", 2) for line in out.splitlines() if line.startswith(("SCORES ", "STAGE "))]
    assert len(printed) == 2 and printed[0][0] == "SCORES", out
    loaded = json.loads(" ".join(printed[0][1:]))
    rows = cv.bestModel.transform(spark_ml.read.parquet(str(saved / "test"))).collect()
    here = {str(r["id"]): [r["prediction"], list(r["probability"])] for r in rows}
    assert loaded["cv"] == loaded["tvs"] == here
    expected = json.loads(json.dumps(fingerprint(estimator)))
    assert expected["optimizer"]["binds"] and expected["model"]["sums"]
    assert loaded["cv_estimator"] == loaded["tvs_estimator"] == json.loads(printed[1][2]) == expected
    assert loaded["cv_maps"] == loaded["tvs_maps"] == [1, 4]


@pytest.mark.timeout(900)
def test_a_tuned_keras_model_saves_and_loads_in_a_new_process(
    keras_tuned: dict[str, Any], loaded_elsewhere: str
) -> None:
    """A CrossValidatorModel over KerasEstimator (tf_keras; `tests.ml.saved_stages.unfitted`'s stage, np=-1,
    launcher "direct", 1 epoch on 64 rows) as its best model, with the estimator, a param map and an evaluator
    (what its writer writes; a real CrossValidator's folds are run by the torch test above), loaded in a new
    process: its best model (a KerasModel) scores the same rows as the fitted model here, and its estimator
    holds what was saved.

    What differs from the torch test above: the fitted model's payload is a Keras model serialized by Keras, and
    the estimator saves its optimizer as Keras' config (`KerasEstimator.saved_values`). The other estimators'
    tuned models go through the torch test's path: LightningEstimator's and the Horovod torch drop-in's fitted
    models are `TorchModel`s (a pickled torch module, the same `StateWriter`/`StateReader`), and a
    FunctionModel's pickled result and predict_fn take the same writer (its own save/load round trip is
    tests/ml/test_generic_and_mlflow.py's)."""
    out = loaded_elsewhere
    printed = dict(line.split(" ", 2)[1:] for line in out.splitlines() if line.startswith("TUNED "))
    assert "keras" in printed, out
    assert len(keras_tuned["scores"]) == 32 and None not in keras_tuned["scores"].values()
    assert json.loads(printed["keras"]) == {**json.loads(json.dumps(keras_tuned)), "maps": [1]}


def test_unfitted_stages_of_every_kind_save_and_load_in_a_pipeline(spark_ml: Any, tmp_path: Path) -> None:
    """LightningEstimator, KerasEstimator (tf_keras), FunctionEstimator, ScoringModel and the Horovod drop-ins,
    each the stage of an unfitted Pipeline saved and loaded (no fit): the loaded stage is of the same class and
    uid, with the same Params, weights, optimizer settings (bound to the loaded model) and functions."""
    from pyspark.ml import Pipeline

    from tests.ml.saved_stages import fingerprint, unfitted

    stages = unfitted()
    for name, stage in stages.items():
        Pipeline(stages=[stage]).write().save(str(tmp_path / name))
    loaded = {name: Pipeline.load(str(tmp_path / name)).getStages()[0] for name in stages}
    assert {n: fingerprint(s) for n, s in loaded.items()} == {n: fingerprint(s) for n, s in stages.items()}
    assert fingerprint(loaded["horovod_torch"])["optimizer"]["binds"]
