"""The originals' own examples run through the drop-ins with only their import line changed, on a local stand-in
for their data, and reach their end: MNIST's print a test accuracy above 0.9, Rossmann's its RMSPE and a prediction
per test row (tests/compat/upstream_examples.py lists them)."""

from __future__ import annotations

import bz2
import logging
from pathlib import Path

import numpy as np
import pytest

from tests.compat.upstream import skip_reason
from tests.compat.upstream_examples import (
    EXAMPLES,
    MNIST_PIXELS,
    Example,
    mnist_stand_in,
    rossmann_stand_in,
    run_example,
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
