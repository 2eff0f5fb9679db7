"""The originals' own examples run through the drop-ins with only their import line changed, on a local stand-in
for their data, and reach their end: MNIST's print a test accuracy above 0.9, Rossmann's its RMSPE and a prediction
per test row (tests/compat/upstream_examples.py lists them); TensorFlow's multi-worker tutorial and pyspark's
TorchDistributor docstring examples run to their end."""

from __future__ import annotations

import bz2
import importlib.util
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from tests.compat.upstream import UPSTREAM, skip_reason
from tests.compat.upstream_examples import (
    EXAMPLES,
    MNIST_PIXELS,
    PYSPARK_DOCSTRINGS,
    TF_TUTORIAL,
    TF_TUTORIAL_RUNS,
    Example,
    mnist_stand_in,
    rossmann_stand_in,
    run_example,
    run_pyspark_docstring_examples,
    run_tf_tutorial,
)

log = logging.getLogger("sparkrunner")


def test_the_mnist_stand_in_is_libsvm_of_784_pixels_of_0_255_and_ten_classes(tmp_path: Path) -> None:
    path = tmp_path / "mnist.bz2"
    mnist_stand_in(path, rows=200)
    lines = bz2.decompress(path.read_bytes()).decode().splitlines()
    labels = [int(line.split()[0]) for line in lines]
    pairs = [item.split(":") for line in lines for item in line.split()[1:]]
    indices, values = np.array([int(i) for i, _ in pairs]), np.array([float(v) for _, v in pairs])
    assert len(lines) == 200 and set(labels) == set(range(10))
    assert indices.min() >= 1 and indices.max() <= MNIST_PIXELS
    assert values.min() >= 1 and values.max() <= 255 and np.array_equal(values, values.round())


def test_the_rossmann_stand_in_has_the_originals_files_and_columns(tmp_path: Path) -> None:
    """The columns the example reads from each of Kaggle's files (as its code names them), a few hundred rows."""
    import pandas as pd

    counts = rossmann_stand_in(tmp_path)
    read = {name: pd.read_csv(tmp_path / f"{name}.csv") for name in ROSSMANN_FILES}
    for name, columns in ROSSMANN_FILES.items():
        assert set(columns) <= set(read[name].columns), name
    assert (len(read["train"]), len(read["test"])) == (counts["train"], counts["test"])
    assert 200 <= counts["train"] <= 1000 and (read["train"]["Sales"] > 0).all()
    assert set(read["googletrend"]["file"]) >= {"Rossmann_DE", "Rossmann_DE_SN"}


ROSSMANN_FILES = {
    "train": ["Store", "DayOfWeek", "Date", "Sales", "Open", "Promo", "StateHoliday", "SchoolHoliday"],
    "test": ["Id", "Store", "DayOfWeek", "Date", "Open", "Promo", "StateHoliday", "SchoolHoliday"],
    "store": ["Store", "StoreType", "Assortment", "CompetitionDistance", "CompetitionOpenSinceMonth",
              "CompetitionOpenSinceYear", "Promo2SinceWeek", "Promo2SinceYear", "PromoInterval"],
    "store_states": ["Store", "State"],
    "state_names": ["StateName", "State"],
    "googletrend": ["file", "week", "trend"],
    "weather": ["file", "Date", "Max_TemperatureC", "Mean_TemperatureC", "Min_TemperatureC", "Max_Humidity",
                "Mean_Humidity", "Min_Humidity", "Max_Wind_SpeedKm_h", "Mean_Wind_SpeedKm_h", "CloudCover",
                "Events"],
}  # fmt: skip
"""What the example reads of each file (its code names these columns)."""


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_original_example_trains_through_the_drop_in(example: Example, tmp_path: Path) -> None:
    reason = skip_reason(example.name, example.path(), example.requires)
    if reason is not None:
        pytest.skip(reason)
    outcome = run_example(example, tmp_path)
    log.info("%s: exit %d, test accuracy %s", example.name, outcome.returncode, outcome.accuracy)
    assert outcome.returncode == 0, outcome.output[-6000:]
    assert example.finished(outcome, tmp_path), outcome.output[-6000:]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("how", TF_TUTORIAL_RUNS)
def test_tensorflow_multi_worker_tutorial(how: str, tmp_path: Path) -> None:
    """TensorFlow's tutorial as written trains for its 3 epochs on both ranks, and the run says once that
    tf.keras is tf_keras there; forced to Keras 3 it fails upstream with a short error naming the ways out;
    ported to Keras 3's torch backend (its tf.keras kept, KERAS_BACKEND set) it trains."""
    needs = ("tensorflow", "torch") if "torch" in how else ("tensorflow", "tf_keras")
    reason = skip_reason("TensorFlow's multi-worker tutorial", UPSTREAM / TF_TUTORIAL, needs)
    if reason is not None:
        pytest.skip(reason)
    outcome = run_tf_tutorial(how, tmp_path)
    log.info("TensorFlow tutorial (%s): exit %d", how, outcome.returncode)
    if how == "Keras 3 forced":
        assert outcome.returncode != 0
        assert "sparkrunner.errors.KerasStrategyError: Keras 3's fit cannot run under" in outcome.output
        for named in (
            "keras-team/keras#20585",
            "TF_USE_LEGACY_KERAS=1",
            "KERAS_BACKEND",
            "keras_data_parallel",
        ):
            assert named in outcome.output
        return
    assert outcome.returncode == 0, outcome.output[-6000:]
    for rank in (0, 1):
        assert f"[rank {rank}] Epoch 3/3" in outcome.output, outcome.output[-6000:]
    said = outcome.output.count("tf.keras is tf_keras (Keras 2) on the ranks")
    assert said == (0 if "torch" in how else 1)


@pytest.mark.slow
@pytest.mark.spark
def test_pyspark_torch_distributor_docstring_examples(tmp_path: Path) -> None:
    """pyspark's TorchDistributor docstring examples that run on a CPU (function, script, Lightning on one node
    and on two), through the drop-in."""
    lightning = "lightning" if importlib.util.find_spec("pytorch_lightning") is None else "pytorch_lightning"
    reason = skip_reason("pyspark's docstring examples", PYSPARK_DOCSTRINGS, ("torch", lightning))
    if reason is not None:
        pytest.skip(reason)
    from pyspark.ml.torch.distributor import TorchDistributor

    lightning_line = 'Trainer(accelerator="gpu", devices=1, num_nodes=num_proc, strategy="ddp")'
    assert lightning_line in (TorchDistributor.__doc__ or ""), (
        "pyspark's docstring changed: update the examples"
    )
    outcome = run_pyspark_docstring_examples(tmp_path)
    log.info("pyspark docstring examples: exit %d", outcome.returncode)
    assert outcome.returncode == 0, outcome.output[-6000:]
    ran = re.findall(r"^EXAMPLE (.+): ok(.*)$", outcome.output, flags=re.MULTILINE)
    assert len(ran) == 4, outcome.output[-6000:]
    for name, detail in ran:
        if name.startswith("Lightning"):
            assert "global_step=4 world_size=2" in detail, (name, detail)  # 64 rows, batch 8, halved by DDP
