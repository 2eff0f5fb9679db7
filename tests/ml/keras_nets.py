"""tf_keras models for the Keras estimator tests (shipped by value to the ranks and the executors)."""

from __future__ import annotations

from typing import Any


def linear_model() -> Any:
    """A tf_keras Dense(1) over 3 inputs, seeded: what `tests.ml.nets.linear_rows` can be fitted with."""
    import tf_keras as keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])


def scaled_tanh(x: Any) -> Any:
    """A custom activation (a plain function): a model naming it rebuilds only with it in `custom_objects`."""
    import keras

    return 1.5 * keras.ops.tanh(x)


def tf_scaled_tanh(x: Any) -> Any:
    """`scaled_tanh` in TensorFlow's ops, for a tf_keras model."""
    import tensorflow as tf

    return 1.5 * tf.tanh(x)


def mean_abs_error(y_true: Any, y_pred: Any) -> Any:
    """A metric as a plain function (Keras 3's ops), as Horovod's Rossmann example's `exp_rmspe` is."""
    import keras

    return keras.ops.mean(keras.ops.abs(y_true - y_pred))
