"""Saving fitted models (real Spark writers, real files) and fitting as the last stage of a Spark ML Pipeline:
a loaded model, alone or inside a loaded PipelineModel, scores exactly as the one that was saved."""

from __future__ import annotations

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
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import StandardScaler, VectorAssembler

    net = classifier()
    pipeline = Pipeline(
        stages=[
            VectorAssembler(inputCols=["a", "b"], outputCol="features"),
            StandardScaler(inputCol="features", outputCol="scaled", withMean=True),
            TorchEstimator(
                model=net, optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss="cross_entropy",
                feature_cols=["scaled"], label_cols=["label"], batch_size=32, epochs=6, np=-2,
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
