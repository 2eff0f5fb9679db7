"""`sparkrunner.compat.horovod_spark_lightning.TorchEstimator`, Horovod's Lightning estimator's drop-in: its
arguments reach `LightningEstimator`'s Params, what sparkrunner cannot honour is refused by name before any rank
starts, and a fit (np=-1, launcher "direct") gets its batches in Horovod's shapes, learns the generating function
and appends ``<label>__output``."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from packaging.version import Version

from sparkrunner.compat.horovod_spark_lightning import TorchEstimator, TorchModel
from sparkrunner.errors import InvalidArgumentError
from tests.conftest import LOCAL_MASTER, spark_session
from tests.ml.lightning_nets import LinearRegression
from tests.ml.nets import BIAS, WEIGHTS, linear_rows

HOROVODS_PERSISTENCE = {
    "TorchEstimatorParamsWriter", "TorchEstimatorParamsWritable", "TorchEstimatorParamsReader",
    "TorchEstimatorParamsReadable",
}  # fmt: skip
"""Public names of Horovod's estimator module that user code does not import: the mixins its own ``save``/``load``
are made of (the drop-in's models save and load as Spark ML stages of their own)."""


def test_every_name_user_code_imports_from_horovods_lightning_package_is_exported() -> None:
    """The oracle is Horovod's own source (read, not imported: it needs Petastorm): the names its package
    ``__init__`` imports and the public names its ``estimator`` module defines."""
    import sparkrunner.compat.horovod_spark_lightning as drop_in

    found = importlib.util.find_spec("horovod")
    if found is None or found.origin is None:
        pytest.skip("horovod is not installed")
    package = Path(found.origin).parent / "spark" / "lightning"
    exported = {a.asname or a.name for node in ast.parse((package / "__init__.py").read_text()).body
                if isinstance(node, ast.ImportFrom) for a in node.names}  # fmt: skip
    defined = set()
    for node in ast.parse((package / "estimator.py").read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    public = {name for name in exported | defined if not name.startswith("_")}
    assert public - HOROVODS_PERSISTENCE == set(drop_in.__all__)
    assert all(hasattr(drop_in, name) for name in drop_in.__all__)
    assert Version(drop_in.MIN_PL_VERSION) <= Version(importlib.metadata.version("pytorch_lightning"))


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


class ShapeProbe(LinearRegression):
    """`LinearRegression` on the vector column ``v``, weighted by the integer column ``w``: notes each batch
    column's row shape and dtype in training and validation (what Horovod's reader gives: a scalar column
    ``(rows,)``, an array or vector column ``(rows, n)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, tuple[tuple[int, ...], str]] = {}

    def _loss(self, batch: dict[str, torch.Tensor], stage: str) -> torch.Tensor:
        self.seen.update({f"{stage} {c}": (tuple(t.shape[1:]), str(t.dtype)) for c, t in batch.items()})
        per_row = (self(batch["v"]).squeeze(1) - batch["y"]) ** 2
        return (per_row * batch["w"]).sum() / batch["w"].sum()

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        loss = self._loss(batch, "train")
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self.log("val_loss", self._loss(batch, "val"), on_epoch=True, sync_dist=True)


@pytest.mark.spark
@pytest.mark.slow
def test_fit_learns_the_generating_function_from_batches_shaped_as_horovods(tmp_path: Path) -> None:
    """The batches follow Horovod's contract (`ShapeProbe` notes them; the oracle is Horovod's reader's rule,
    written out below): the vector feature ``(rows, 3)``, the scalar double label and the scalar integer weight
    ``(rows,)``, in training and validation."""
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    spark = spark_session(LOCAL_MASTER)
    rows = linear_rows(spark, 1200).select(array_to_vector("x").alias("v"), "y", F.lit(2).alias("w"))
    model = TorchEstimator(
        num_proc=None, np=-1, launcher="direct", model=ShapeProbe(), store=str(tmp_path), feature_cols=["v"],
        label_cols=["y"], sample_weight_col="w", validation=0.2, batch_size=32, epochs=12, verbose=0,
        tracking=False,
    ).fit(rows)  # fmt: skip

    assert isinstance(model, TorchModel) and model.getOutputCols() == ["y__output"]
    trained = model.getModel()
    assert trained.seen == {
        f"{stage} {column}": shape
        for stage in ("train", "val")
        for column, shape in {
            "v": ((3,), "torch.float32"),
            "y": ((), "torch.float32"),
            "w": ((), "torch.float32"),
        }.items()
    }
    np.testing.assert_allclose(trained.layer.weight.detach().numpy()[0], WEIGHTS, atol=0.15)
    np.testing.assert_allclose(trained.layer.bias.item(), BIAS, atol=0.15)
    test = linear_rows(spark, 100, partitions=2, seed=100).select(array_to_vector("x").alias("v"), "y")
    scored = model.transform(test).collect()
    np.testing.assert_allclose([r["y__output"] for r in scored], [r["y"] for r in scored], atol=0.15)
