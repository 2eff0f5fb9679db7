"""The scoring UDF's two bodies (`BatchScorer.arrow` for Spark >= 4.1, `BatchScorer.pandas` before), fed the
batches Spark would hand them, against the module's own forward pass and torch's softmax; bad feature arrays
raise a typed error naming the column. In-process: no Spark (the Spark runs are in test_torch_estimator.py)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa
import pytest
import torch

from sparkrunner.errors import UnsupportedColumnError
from sparkrunner.ml.workers.scoring import BatchScorer, ModelSource

RNG = np.random.default_rng(0)


def net(outputs: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, outputs))


def scorer(model: torch.nn.Module, key: str, probability: str | None) -> BatchScorer:
    return BatchScorer(ModelSource(key, payload=cloudpickle.dumps(model)), 7, probability)


def arrays(rows: int) -> tuple[pa.Array, pa.Array]:
    """An array<float>[3] column (a list array, as Spark sends it) and a double column."""
    flat = RNG.random(rows * 3, dtype=np.float32)
    offsets = pa.array(np.arange(0, rows * 3 + 1, 3, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(flat)), pa.array(RNG.random(rows))


def expected(model: torch.nn.Module, batch: tuple[pa.Array, pa.Array]) -> np.ndarray:
    x = np.hstack([np.stack(batch[0].to_pylist()), batch[1].to_numpy()[:, None]]).astype(np.float32)
    with torch.no_grad():
        return model(torch.from_numpy(x)).double().numpy()


def test_both_bodies_give_the_modules_probabilities_and_classes() -> None:
    model = net(3)
    batches = [arrays(30), arrays(5)]
    from_arrow = list(scorer(model, "arrow-classifier", "softmax").arrow(iter(batches), ("v", "w")))
    from_pandas = list(
        scorer(model, "pandas-classifier", "softmax").pandas(
            iter(tuple(a.to_pandas() for a in b) for b in batches)
        )
    )
    for batch, struct, frame in zip(batches, from_arrow, from_pandas, strict=True):
        probabilities = torch.softmax(torch.from_numpy(expected(model, batch)), 1).numpy()
        assert struct.type.field("probability").type.value_type == pa.float64()
        found = np.array(struct.field("probability").to_pylist())
        np.testing.assert_allclose(found, probabilities, rtol=1e-6)
        np.testing.assert_allclose(np.stack(frame["probability"]), probabilities, rtol=1e-6)
        assert struct.field("prediction").to_pylist() == list(probabilities.argmax(1).astype(float))
        assert list(frame["prediction"]) == list(probabilities.argmax(1).astype(float))


@pytest.mark.parametrize("outputs", [1, 2])
def test_a_regressors_outputs_are_a_number_or_an_array_a_row(outputs: int) -> None:
    model = net(outputs)
    batch = arrays(12)
    (struct,) = scorer(model, f"regressor-{outputs}", None).arrow(iter([batch]), ("v", "w"))
    found = np.array(struct.field("prediction").to_pylist())
    np.testing.assert_allclose(found.reshape(12, outputs), expected(model, batch), rtol=1e-6)


@pytest.mark.parametrize(
    "column, problem",
    [
        (pa.array([[1.0, 2.0, 3.0], [1.0, 2.0]], pa.list_(pa.float32())), "different lengths"),
        (pa.array([[1.0, 2.0, 3.0], None], pa.list_(pa.float32())), "null"),
    ],
    ids=["ragged", "null"],
)
def test_feature_arrays_a_model_cannot_take_raise_naming_the_column(column: Any, problem: str) -> None:
    batch = (column, pa.array([0.5, 0.5]))
    with pytest.raises(UnsupportedColumnError, match=f"'v'.*{problem}"):
        list(scorer(net(1), "bad-input", None).arrow(iter([batch]), ("v", "w")))


class _Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_worker_that_loads_a_model_keeps_what_it_holds_out_of_later_collections() -> None:
    """pyspark's worker collects garbage after every task: once a worker has loaded a model, what it holds (its
    imports, the model) is frozen so those collections skip it, and garbage made before was collected, not kept
    (Python's own freeze count and a weak reference are the oracles)."""
    gc.disable()  # no automatic collection between the garbage's making and the load
    before = gc.get_freeze_count()
    garbage = weakref.ref(_Cycle())
    try:
        assert garbage() is not None
        list(scorer(net(2), "freezing-worker", None).arrow(iter([arrays(3)]), ("v", "w")))
        assert gc.get_freeze_count() > before
        assert garbage() is None
    finally:
        gc.unfreeze()
        gc.enable()
