"""`sparkrunner.compat.horovod_spark_lightning.TorchEstimator`, Horovod's Lightning estimator's drop-in: its
arguments reach `LightningEstimator`'s Params, what sparkrunner cannot honour is refused by name before any rank
starts, and a fit (np=-1, launcher "direct", the batch two ranks of 16 made) learns the generating function and
appends ``<label>__output``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparkrunner.compat.horovod_spark_lightning import TorchEstimator, TorchModel
from sparkrunner.errors import InvalidArgumentError
from tests.conftest import LOCAL_MASTER, spark_session
from tests.ml.lightning_nets import LinearRegression
from tests.ml.nets import BIAS, WEIGHTS, linear_rows


class LocalStore:
    """Shaped like Horovod's ``LocalStore``: a ``prefix_path``."""

    def __init__(self, prefix_path: str) -> None:
        self.prefix_path = prefix_path


def test_horovod_arguments_become_params(tmp_path: Path) -> None:
    callbacks = [object()]
    estimator = TorchEstimator(
        num_proc=2, model=LinearRegression(), store=LocalStore(str(tmp_path)), feature_cols=["x"],
        label_cols=["y"], batch_size=8, epochs=3, random_seed=7, callbacks=callbacks,
        trainer_args={"gradient_clip_val": 1.0}, log_every_n_steps=50, launcher="direct",
    )  # fmt: skip
    get = estimator.getOrDefault
    assert (get("num_proc"), get("store"), get("seed"), get("epochs")) == (2, str(tmp_path), 7, 3)
    assert get("callbacks") is callbacks and get("trainer_args") == {"gradient_clip_val": 1.0}
    assert get("prediction_col") == "y__output"


def test_horovods_trainer_arguments_and_input_contract_reach_every_ranks_trainer() -> None:
    logger = object()
    estimator = TorchEstimator(
        model=LinearRegression(), feature_cols=["x"], label_cols=["y"], logger=logger, log_every_n_steps=5,
        profiler="simple", trainer_args={"gradient_clip_val": 1.0}, input_shapes=[[-1, 3]],
        label_shapes=[[-1, 1]], inmemory_cache_all=True, val_batch_size=64,
    )  # fmt: skip
    get = estimator.getOrDefault
    assert get("trainer_args") == {
        "logger": logger, "log_every_n_steps": 5, "profiler": "simple", "gradient_clip_val": 1.0,
    }  # fmt: skip
    assert (get("input_shapes"), get("label_shapes"), get("inmemory_cache_all"), get("val_batch_size")) == (
        [[-1, 3]],
        [[-1, 1]],
        True,
        64,
    )


@pytest.mark.parametrize(
    "given",
    [
        {"optimizer": object()},
        {"loss": "mse"},
        {"metrics": [abs]},
        {"num_gpus": 1},
        {"terminate_on_nan": True},
    ],
    ids=lambda given: next(iter(given)),
)
def test_what_sparkrunner_cannot_honour_is_refused_by_name(given: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError, match=next(iter(given))):
        TorchEstimator(model=LinearRegression(), feature_cols=["x"], label_cols=["y"], **given)


@pytest.mark.spark
@pytest.mark.slow
def test_fit_learns_the_generating_function(tmp_path: Path) -> None:
    spark = spark_session(LOCAL_MASTER)
    model = TorchEstimator(
        num_proc=None, np=-1, launcher="direct", model=LinearRegression(), store=str(tmp_path),
        feature_cols=["x"], label_cols=["y"], batch_size=32, epochs=12, verbose=0, tracking=False,
    ).fit(linear_rows(spark, 1200))  # fmt: skip

    assert isinstance(model, TorchModel) and model.getOutputCols() == ["y__output"]
    trained = model.getModel()
    np.testing.assert_allclose(trained.layer.weight.detach().numpy()[0], WEIGHTS, atol=0.15)
    np.testing.assert_allclose(trained.layer.bias.item(), BIAS, atol=0.15)
    rows = model.transform(linear_rows(spark, 100, partitions=2, seed=100)).collect()
    np.testing.assert_allclose([r["y__output"] for r in rows], [r["y"] for r in rows], atol=0.15)
