"""Pure logic of sparkrunner.ml, checked against independent computations: output columns against torch's own
softmax/sigmoid, feature assembly against explicit numpy stacking, the validation batch rule by brute force."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import features, losses, outputs
from sparkrunner.ml.ranks.training import validation_batch_size


def test_classifier_columns_match_torch() -> None:
    raw = np.random.default_rng(0).normal(size=(6, 3))
    found = outputs.columns("softmax", raw)
    expected = torch.softmax(torch.from_numpy(raw), dim=1).numpy()
    np.testing.assert_allclose(np.array(found["probability"]), expected, rtol=1e-12)
    assert list(found["prediction"]) == list(expected.argmax(axis=1).astype(float))
    log_probs = torch.log_softmax(torch.from_numpy(raw), dim=1).numpy()
    np.testing.assert_allclose(
        np.array(outputs.columns("exp", log_probs)["probability"]), expected, rtol=1e-9
    )


def test_one_logit_gives_two_class_probabilities() -> None:
    logits = np.array([[-2.0], [0.5], [3.0]])
    found = outputs.columns("sigmoid", logits)
    positive = torch.sigmoid(torch.from_numpy(logits[:, 0])).numpy()
    np.testing.assert_allclose(
        np.array(found["probability"]), np.stack([1 - positive, positive], 1), rtol=1e-12
    )
    assert list(found["prediction"]) == [0.0, 1.0, 1.0]


def test_probabilities_a_model_gives_itself_are_kept_and_their_argmax_is_the_class() -> None:
    """A Keras classifier's softmax layer already gives probabilities: they pass through unchanged."""
    given = torch.softmax(torch.tensor([[1.0, 3.0, 0.0], [2.0, -1.0, 0.5]], dtype=torch.float64), 1).numpy()
    found = outputs.columns("given", given)
    np.testing.assert_array_equal(np.array(found["probability"]), given)
    assert list(found["prediction"]) == [1.0, 0.0]


def test_regressor_columns_and_their_types() -> None:
    assert list(outputs.columns(None, np.array([[1.5], [2.5]]))["prediction"]) == [1.5, 2.5]
    several = outputs.columns(None, np.array([[1.0, 2.0], [3.0, 4.0]]))["prediction"]
    assert [list(v) for v in several] == [[1.0, 2.0], [3.0, 4.0]]
    ddl = {
        k: {n: t.simpleString() for n, t in outputs.spark_types(*k).items()}
        for k in [(None, 1), (None, 3), ("softmax", 3)]
    }
    assert ddl[(None, 1)] == {"prediction": "double"}
    assert ddl[(None, 3)] == {"prediction": "array<double>"}
    assert ddl[("softmax", 3)] == {"prediction": "double", "probability": "array<double>"}


def test_features_are_numbers_and_arrays_side_by_side() -> None:
    numbers = pd.Series([1, 2, 3])
    arrays = pd.Series([np.array([0.5, 1.5]), np.array([2.5, 3.5]), np.array([4.5, 5.5])])
    found = features.matrix([features.from_pandas(numbers), features.from_pandas(arrays)])
    expected = np.array([[1, 0.5, 1.5], [2, 2.5, 3.5], [3, 4.5, 5.5]], dtype=np.float32)
    assert found.dtype == np.float32 and np.array_equal(found, expected)


def test_the_logged_models_pyfunc_stacks_every_column_kind_as_explicit_stacking_does() -> None:
    """`sparkrunner_pyfunc` (what spark_udf and models serve run) on numbers, floats, arrays of doubles and of
    floats and lists (a served request's vectors), stacked whole into the model's dtype: row by row, the same."""
    from sparkrunner.ml import sparkrunner_pyfunc

    rows = np.random.default_rng(0).random((5, 6))
    frame = pd.DataFrame({
        "a": rows[:, 0], "f": rows[:, 1].astype(np.float32), "ad": list(rows[:, 2:4]),
        "af": list(rows[:, 4:5].astype(np.float32)), "v": [list(r) for r in rows[:, 5:]],
    })  # fmt: skip
    expected = np.array([[r[0], np.float32(r[1]), r[2], r[3], np.float32(r[4]), r[5]] for r in rows])
    for dtype in (np.float32, np.float64):
        found = sparkrunner_pyfunc.feature_matrix(frame, dtype)
        assert found.dtype == dtype and np.array_equal(found, expected.astype(dtype))


def test_column_widths_against_shapes_per_column_or_side_by_side() -> None:
    """One shape per column when they are as many (Horovod's input_shapes), else the columns side by side fill the
    shapes (a Keras model's inputs); a mismatch names the column(s), their width and the shape(s)."""
    features.check_widths("input_shapes", [(3, 1), (1,)], ["x", "s"], [3, 1])
    features.check_widths("the model's input shape(s)", [(2, 2)], ["a", "b"], [1, 3])
    with pytest.raises(
        InvalidArgumentError, match=r"the column 's' holds 2 values a row, but its shape \[-1, 1\]"
    ):
        features.check_widths("input_shapes", [(3, 1), (1,)], ["x", "s"], [3, 2])
    with pytest.raises(
        InvalidArgumentError, match=r"\['a', 'b', 'c'\] side by side hold 3 .* \[-1, 1\], \[-1, 1\] hold 2"
    ):
        features.check_widths("the model's input shape(s)", [(1,), (1,)], ["a", "b", "c"], [1, 1, 1])


@pytest.mark.parametrize(
    ("loss", "kind"),
    [("cross_entropy", "softmax"), (torch.nn.NLLLoss(), "exp"), ("bce_with_logits", "sigmoid"), ("mse", None),
     (torch.nn.L1Loss(), None), (lambda out, y: (out - y) ** 2, None)],
)  # fmt: skip
def test_what_a_loss_says_about_the_model(loss: object, kind: str | None) -> None:
    assert losses.probability_kind(loss) == kind


def test_a_loss_module_is_made_per_row_without_changing_the_callers() -> None:
    mine = torch.nn.MSELoss()
    per_row = losses.loss_module(mine)
    assert per_row.reduction == "none" and mine.reduction == "mean"


@pytest.mark.parametrize(
    ("rows", "world", "batch"), [(100, 2, 32), (97, 2, 32), (1000, 3, 64), (5, 2, 32), (1, 1, 8)]
)
def test_the_validation_batch_leaves_out_at_most_one_percent(rows: int, world: int, batch: int) -> None:
    size = validation_batch_size(rows, world, batch)
    allowed = max(world - 1, rows // 100)
    fits = [b for b in range(1, batch + 1) if b * world <= max(rows, world) and rows % (world * b) <= allowed]
    assert size == max(fits)
