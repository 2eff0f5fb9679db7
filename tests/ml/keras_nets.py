"""tf_keras models and losses for the Keras estimator tests (shipped by value to the ranks and the executors)."""

from __future__ import annotations

from typing import Any

from tests.ml.nets import KillPoint


def linear_model() -> Any:
    """A tf_keras Dense(1) over 3 inputs, seeded: what `tests.ml.nets.linear_rows` can be fitted with."""
    import tf_keras as keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])


class SteppedMse:
    """Mean squared error whose every call (one per training step, run by TensorFlow as the step runs) goes
    through `point` (`tests.ml.nets.KillPoint`)."""

    def __init__(self, point: KillPoint) -> None:
        self.point = point

    def __call__(self, y_true: Any, y_pred: Any) -> Any:
        import tensorflow as tf

        def step() -> int:
            self.point.step()
            return 0

        with tf.control_dependencies([tf.py_function(step, [], tf.int32)]):
            return tf.reduce_mean(tf.square(y_true - y_pred), axis=-1)
