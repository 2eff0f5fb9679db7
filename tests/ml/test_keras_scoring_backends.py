"""`keras_models.predict`, the forward pass `KerasModel.transform` runs, on each Keras 3 backend a Spark worker may
have (`KERAS_BACKEND` is read once, at import: each backend in a fresh interpreter). Oracle: Keras' own
`model.predict` in the same process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

_PROGRAM = """
import numpy as np, keras
from sparkrunner.ml import keras_models
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
x = np.random.default_rng(0).random((5, 4)).astype("float32")
expected = keras.ops.convert_to_numpy(model.predict(x, verbose=0))
scored = keras_models.predict(model, x)
assert isinstance(scored, np.ndarray) and np.allclose(scored, expected, atol=1e-6), (scored, expected)
print("SCORED", keras.backend.backend())
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "tensorflow"])
def test_keras_3_scoring_gives_keras_predictions_on_each_backend(backend: str) -> None:
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT)}
    env.pop("TF_USE_LEGACY_KERAS", None)
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0 and f"SCORED {backend}" in done.stdout, done.stdout + done.stderr[-3000:]
