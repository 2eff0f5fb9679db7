"""tf_keras models for the Keras estimator tests (shipped by value to the ranks and the executors)."""

from __future__ import annotations

from typing import Any


def linear_model() -> Any:
    """A tf_keras Dense(1) over 3 inputs, seeded: what `tests.ml.nets.linear_rows` can be fitted with."""
    import tf_keras as keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
