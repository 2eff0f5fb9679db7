"""Bad input to `TorchEstimator.fit` fails with a typed error that says what to change, before any rank starts:
the fit's MLflow store (where every started run is recorded) is not even opened, so it holds no run, and no
rank process is left."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from sparkrunner.errors import (
    InvalidArgumentError,
    NotEnoughDataError,
    NotPicklableError,
    UnsupportedColumnError,
)
from sparkrunner.ml import TorchEstimator

pytestmark = [pytest.mark.spark, pytest.mark.slow]


class Locked(torch.nn.Linear):
    """A model that holds a lock: it cannot be pickled."""

    def __init__(self) -> None:
        super().__init__(2, 1)
        self.lock = threading.Lock()


@pytest.fixture(scope="module")
def frame(spark_ml: Any) -> Any:
    from pyspark.sql import functions as F

    return spark_ml.range(0, 40, numPartitions=2).select(
        F.col("id").cast("double").alias("a"),
        (F.col("id") * 2).cast("double").alias("b"),
        F.concat(F.lit("c"), F.col("id").cast("string")).alias("text"),
        (F.col("id") % 2).alias("label"),
        (F.col("id") % 5 == 0).alias("held_out"),
    )


CASES = {
    "missing column": (dict(feature_cols=["a", "nope"]), InvalidArgumentError, "'nope'"),
    "string feature": (dict(feature_cols=["a", "text"]), UnsupportedColumnError, "'text' has type string"),
    "string label": (dict(label_cols=["text"]), UnsupportedColumnError, "StringIndexer"),
    "no feature": (dict(feature_cols=[]), InvalidArgumentError, "feature_cols is empty"),
    "validation 0": (dict(validation=0.0), InvalidArgumentError, "strictly between 0 and 1"),
    "validation 1.5": (dict(validation=1.5), InvalidArgumentError, "strictly between 0 and 1"),
    "validation column missing": (dict(validation="nope"), InvalidArgumentError, "validation column 'nope'"),
    "validation column text": (dict(validation="text"), UnsupportedColumnError, "must be boolean"),
    "unknown loss": (dict(loss="hinge"), InvalidArgumentError, "loss='hinge' is unknown"),
    "data mode": (dict(data="copy"), InvalidArgumentError, "data='copy' is unknown"),
    "epochs": (dict(epochs=0), InvalidArgumentError, "epochs must be an int >= 1"),
    "timeout": (dict(timeout=0), InvalidArgumentError, "timeout must be a number of seconds > 0"),
    "max_failures": (dict(max_failures=-1), InvalidArgumentError, "max_failures must be an int >= 0"),
    "input shape of another width": (
        dict(input_shapes=[[-1, 2], [-1, 1]]),
        InvalidArgumentError,
        r"the column 'a' holds 1 values a row, but its shape \[-1, 2\] holds 2",
    ),
    "an input shape short": (dict(input_shapes=[[-1, 1]]), InvalidArgumentError, "give one shape per column"),
    "tracking": (dict(tracking=7), InvalidArgumentError, "tracking must be None, True, False"),
    "no backward pass per step": (
        dict(backward_passes_per_step=0),
        InvalidArgumentError,
        "backward_passes_per_step must be an int >= 1",
    ),
    "val_batch_size 0": (dict(val_batch_size=0), InvalidArgumentError, "val_batch_size must be an int >= 1"),
    "no training step": (
        dict(train_steps_per_epoch=0),
        InvalidArgumentError,
        "train_steps_per_epoch must be an int >= 1",
    ),
    "metric not a function": (dict(metrics=["mse"]), InvalidArgumentError, "give a list of functions"),
    "metrics of one name": (
        dict(metrics=[torch.nn.functional.l1_loss, lambda o, y: o, lambda o, y: o]),
        InvalidArgumentError,
        r"the names \['<lambda>'\] are taken",
    ),
    "unpicklable metric": (dict(metrics=[Locked()]), NotPicklableError, "the metric Locked cannot be sent"),
    "unpicklable model": (dict(model=Locked()), NotPicklableError, "cannot be sent to the ranks"),
    "not a module": (dict(model=lambda x: x), InvalidArgumentError, "must be a torch.nn.Module"),
    # pyspark's converters refuse these with a bare TypeError; the stage's own error names the Param
    "epochs not a number": (
        dict(epochs="many"),
        InvalidArgumentError,
        r"epochs='many' \(str\) is not a valid value: Could not convert",
    ),
    "shuffle not a bool": (
        dict(shuffle="yes"),
        InvalidArgumentError,
        "shuffle='yes' .*shuffle the training rows",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_refused_before_any_rank_starts(frame: Any, tmp_path: Any, case: str) -> None:
    store = tmp_path / "mlflow.db"  # MLflow makes the file when the store is first opened
    uri = f"sqlite:///{store}"
    changes, error, text = CASES[case]
    params = dict(
        model=torch.nn.Linear(2, 1), feature_cols=["a", "b"], label_cols=["label"], np=-2, launcher="direct",
        tracking=uri, verbose=0,
    )  # fmt: skip
    with pytest.raises(error, match=text):
        TorchEstimator(**{**params, **changes}).fit(frame)
    assert not store.exists()


def test_an_empty_dataframe_or_too_few_rows_are_refused(frame: Any, tmp_path: Any) -> None:
    store = tmp_path / "mlflow.db"
    uri = f"sqlite:///{store}"
    estimator = TorchEstimator(
        model=torch.nn.Linear(2, 1), feature_cols=["a", "b"], label_cols=["label"], np=-2, launcher="direct",
        tracking=uri,
    )  # fmt: skip
    with pytest.raises(NotEnoughDataError, match="no rows"):
        estimator.fit(frame.where("a < 0"))
    with pytest.raises(NotEnoughDataError, match="validation rows are empty"):
        estimator.copy({estimator.validation: "held_out"}).fit(frame.where("NOT held_out"))
    with pytest.raises(NotEnoughDataError, match="fewer than one batch of 32 for each of 2 ranks"):
        estimator.fit(frame)  # 40 rows, 2 ranks of 32
    assert not store.exists()


def test_saving_an_estimator_whose_model_cannot_be_pickled_names_it(spark_ml: Any, tmp_path: Any) -> None:
    """Refused at save, before anything is written: the error names the Params pickled and the cause."""
    estimator = TorchEstimator(model=Locked(), feature_cols=["a"], label_cols=["label"])
    with pytest.raises(NotPicklableError, match=r"TorchEstimator's model.*lock"):
        estimator.write().save(str(tmp_path / "saved"))
    assert not (tmp_path / "saved").exists()
