"""`sparkrunner.keras_data_parallel` under `Runner` (np < 0, launcher "direct", Keras 3 on its torch backend,
gloo): two ranks with half a batch each learn what one rank learns with the whole batch (the weights agree to
float rounding), a rank whose Keras is on another backend is told what to set, and a tf_keras model is refused. Oracle: the one-rank run.
Module: `sparkrunner.ranks.keras_data_parallel`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sparkrunner import Runner

pytestmark = pytest.mark.slow


def _train(global_batch: int) -> tuple[list[Any], list[float]]:
    import keras

    from sparkrunner import keras_data_parallel, keras_metric_average, rank_context

    rank, world = rank_context().rank, rank_context().world_size
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = x @ rng.normal(size=(8, 1)).astype("float32")
    keras.utils.set_random_seed(rank)  # different on each rank: keras_data_parallel copies rank 0's weights
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model = keras_data_parallel(model)
    batch = global_batch // world  # step k of rank r takes rows [global_batch*k + batch*r, ... + batch)
    share = [i for i in range(256) if (i // batch) % world == rank]
    history = model.fit(
        x[share], y[share], batch_size=batch, epochs=4, shuffle=False, verbose=0,
        callbacks=[keras_metric_average()],
    )  # fmt: skip
    return model.get_weights(), history.history["loss"]


def test_two_ranks_learn_what_one_rank_learns() -> None:
    env = {"KERAS_BACKEND": "torch"}
    one = Runner(np=-1, launcher="direct", env=env, tracking=False).run(_train, 64)
    two = Runner(np=-2, launcher="direct", env=env, tracking=False).run(_train, 64)
    for a, b in zip(one[0], two[0], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(one[1], two[1], rtol=1e-4)  # the loss averaged over the ranks: one rank's
    assert two[1][-1] < two[1][0]


def test_another_backend_is_refused_with_what_to_set() -> None:
    keras = pytest.importorskip("keras")
    if keras.backend.backend() == "torch":
        pytest.skip("this process runs Keras on the torch backend")
    from sparkrunner import keras_data_parallel
    from sparkrunner.errors import InvalidArgumentError

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(InvalidArgumentError, match="set KERAS_BACKEND=torch"):
        keras_data_parallel(model)


def test_a_tf_keras_model_is_refused_before_training() -> None:
    """What `tf.keras` builds under TF_USE_LEGACY_KERAS=1 is not a Keras 3 model, whatever the backend."""
    tf_keras = pytest.importorskip("tf_keras")
    from sparkrunner import keras_data_parallel
    from sparkrunner.errors import InvalidArgumentError

    model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(
        InvalidArgumentError, match="takes a Keras 3 model on the torch backend, not a tf_keras"
    ):
        keras_data_parallel(model)
