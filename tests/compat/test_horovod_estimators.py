"""Horovod's TorchEstimator code, with only the import changed (`sparkrunner.compat.horovod_estimators`), fits
on sparkrunner's ranks (np < 0 and a `local[2]` barrier stage, launcher "direct") and its TorchModel scores on
the executors into Horovod's ``<label>__output`` column. Oracles: the function that generated the labels, and
the fitted module's own forward pass on the driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sparkrunner.compat.horovod_spark import TorchEstimator, TorchModel
from sparkrunner.errors import InvalidArgumentError
from tests.ml.nets import BIAS, WEIGHTS, LockedMSE, class_rows, classifier, forward, linear_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]
store_module = pytest.importorskip("horovod.spark.common.store")
Compression = pytest.importorskip("horovod.torch.compression").Compression


def test_horovod_style_fit_learns_and_transform_writes_the_label_output_column(
    spark_local: Any, tmp_path: Path
) -> None:
    """``num_proc=2`` (a `local[2]` barrier stage), with Horovod's `loss_constructors` building in each rank a
    loss that cannot be pickled (`LockedMSE`). Horovod's loss function form, and fp16 compression, are the fit
    below on np < 0."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    estimator = TorchEstimator(
        num_proc=2, store=store_module.LocalStore(str(tmp_path / "store")), model=net,
        optimizer=torch.optim.Adam(net.parameters(), lr=0.05), loss_constructors=[LockedMSE], feature_cols=["x"],
        label_cols=["y"], batch_size=32, epochs=25, validation=0.25, random_seed=1, verbose=0,
        launcher="direct", tracking=False,
    )  # fmt: skip
    model = estimator.fit(linear_rows(spark_local, 1200))

    assert isinstance(model, TorchModel)
    trained = model.getModel()
    np.testing.assert_allclose(trained.weight.detach().numpy()[0], WEIGHTS, atol=0.1)
    assert len(model.getHistory()["val_loss"]) == 25 and model.getHistory()["val_loss"][-1] < 0.01
    assert model.getOutputCols() == ["y__output"]

    test = linear_rows(spark_local, 200, partitions=2, seed=100)
    rows = model.transform(test).collect()
    x, scored = np.array([r["x"] for r in rows]), np.array([r["y__output"] for r in rows])
    np.testing.assert_allclose(scored, forward(trained, x)[:, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scored, x @ WEIGHTS + BIAS, atol=0.1)

    # Horovod's models save and load as Spark ML stages too; the class survives the round trip
    model.setOutputCols(["estimate"]).write().save(str(tmp_path / "model"))
    loaded = TorchModel.load(str(tmp_path / "model"))
    assert type(loaded) is TorchModel and loaded.getOutputCols() == ["estimate"]
    again = np.array([r["estimate"] for r in loaded.transform(test).collect()])
    np.testing.assert_allclose(again, scored, rtol=1e-6)


def test_fp16_compression_averages_the_gradients_in_half_precision_on_the_cpu(
    spark_local: Any, tmp_path: Path
) -> None:
    """np=-2, launcher direct, `use_gpu=False`, Horovod's loss function form (a function that returns the batch's
    mean): one SGD step (lr=1) from zero weights leaves minus the averaged gradient in each weight.
    `hvd.Compression.fp16` (DDP's fp16 hook) averages it in half precision, so every weight is a float16 value
    (the oracle: float16's own rounding; gradients of these random rows averaged in full precision are not, each
    but with odds of about 1 in 8000). `use_gpu=False` changes nothing on this machine (no GPU): the spec's
    device choice is tests/ml/test_spec.py's, the GPU case untested."""
    net = torch.nn.Linear(3, 1)
    torch.nn.init.zeros_(net.weight)
    torch.nn.init.zeros_(net.bias)
    model = TorchEstimator(
        model=net, optimizer=torch.optim.SGD(net.parameters(), lr=1.0), loss=torch.nn.functional.mse_loss,
        feature_cols=["x"], label_cols=["y"], batch_size=8, epochs=1, shuffle=False, use_gpu=False,
        gradient_compression=Compression.fp16, np=-2, launcher="direct", tracking=False, verbose=0,
        store=str(tmp_path / "store"),
    ).fit(linear_rows(spark_local, 16))  # fmt: skip
    trained = torch.cat([p.detach().reshape(-1) for p in model.getModel().parameters()])
    assert int(torch.count_nonzero(trained)) == 4
    assert torch.equal(trained.half().float(), trained), trained.tolist()


def test_a_scalar_double_label_reaches_a_horovod_style_loss_function_as_horovod_gives_it(
    spark_local: Any, tmp_path: Path
) -> None:
    """np=-1, launcher direct. Horovod's torch reader gives a scalar label column as one float a row, and its
    MNIST example casts it in its loss (``F.nll_loss(output, target.long())``): a double label from libsvm.
    Oracle: the rule that made the labels, on new points (scoring is the other tests')."""
    from pyspark.sql import functions as F

    torch.manual_seed(0)
    net = torch.nn.Sequential(classifier(), torch.nn.LogSoftmax(dim=1))
    model = TorchEstimator(
        np=-1, launcher="direct", store=str(tmp_path / "store"), model=net,
        optimizer=torch.optim.Adam(net.parameters(), lr=0.05),
        loss=lambda output, target: torch.nn.functional.nll_loss(output, target.long()),
        feature_cols=["a", "b"], label_cols=["label"], batch_size=40, epochs=8, verbose=0, tracking=False,
    ).fit(class_rows(spark_local, 800).withColumn("label", F.col("label").cast("double")))  # fmt: skip

    points = np.random.default_rng(5).random((200, 2), dtype=np.float32)
    predicted = forward(model.getModel(), points).argmax(axis=1)
    assert np.mean(predicted == (points.sum(axis=1) > 1)) > 0.9


def test_a_torch_model_built_by_hand_with_horovods_keywords_scores_as_horovods_does(spark_local: Any) -> None:
    """Horovod's ``TorchModel(history=, model=, feature_columns=, label_columns=, input_shapes=, optimizer=,
    run_id=)`` / ``_metadata=``: one output per row in ``<label>__output`` as a number, several as an ML vector
    (Horovod's types). Oracles: the generating function and the modules' own forward pass on the driver."""
    from pyspark.ml.linalg import VectorUDT

    net = torch.nn.Linear(3, 1)
    with torch.no_grad():
        net.weight.copy_(torch.from_numpy(WEIGHTS[None].astype(np.float32)))
        net.bias.fill_(BIAS)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    model = TorchModel(
        history=None, model=net, feature_columns=["x"], label_columns=["y"], input_shapes=[[3]],
        optimizer=optimizer, run_id="by-hand",
    )  # fmt: skip
    assert (model.getOutputCols(), model.getRunId(), model.getHistory()) == (["y__output"], "by-hand", {})
    assert model.getOptimizer() is optimizer

    test = linear_rows(spark_local, 100, partitions=2, seed=5)
    rows = model.transform(test).collect()
    x = np.array([r["x"] for r in rows])
    np.testing.assert_allclose([r["y__output"] for r in rows], x @ WEIGHTS + BIAS, rtol=1e-5, atol=1e-5)

    wide_net = torch.nn.Linear(3, 2)
    wide = TorchModel(
        model=wide_net, feature_columns=["x"], label_columns=["y"], _metadata={"x": {"shape": 3}}
    )
    scored = wide.transform(test)
    assert isinstance(scored.schema["y__output"].dataType, VectorUDT)
    rows = scored.collect()
    got = np.array([r["y__output"].toArray() for r in rows])
    np.testing.assert_allclose(got, forward(wide_net, [r["x"] for r in rows]), rtol=1e-5, atol=1e-5)


def test_a_torch_model_built_by_hand_without_its_input_width_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"needs input_shapes=\[\[n\]\]"):
        TorchModel(model=torch.nn.Linear(3, 1), feature_columns=["x"], label_columns=["y"])


def test_horovod_style_keras_fit_learns_and_writes_the_label_output_column(
    spark_local: Any, tmp_path: Path
) -> None:
    """np=-1, launcher "direct", the batch two ranks of 32 made (the same steps): the drop-in's Params and
    ``<label>__output`` column. ``num_proc`` becomes the barrier stage's ranks by the translation the torch
    drop-in's fit above takes, and KerasEstimator's barrier stage is tests/ml/test_keras_estimator.py's."""
    keras = pytest.importorskip("tf_keras")
    from sparkrunner.compat.horovod_spark import KerasEstimator, KerasModel

    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
    model = KerasEstimator(
        np=-1, store=store_module.Store.create(str(tmp_path / "store")), model=net,
        optimizer=keras.optimizers.Adam(0.05), loss="mse", metrics=["mae"], feature_cols=["x"], label_cols=["y"],
        batch_size=64, epochs=10, verbose=0, launcher="direct", tracking=False,
    ).fit(linear_rows(spark_local, 1000))  # fmt: skip

    assert isinstance(model, KerasModel) and set(model.getHistory()) == {"loss", "mae"}
    np.testing.assert_allclose(model.getModel().get_weights()[0][:, 0], WEIGHTS, atol=0.1)
    rows = model.transform(linear_rows(spark_local, 200, partitions=2, seed=100)).collect()
    x, scored = np.array([r["x"] for r in rows]), np.array([r["y__output"] for r in rows])
    np.testing.assert_allclose(scored, x @ WEIGHTS + BIAS, atol=0.1)
