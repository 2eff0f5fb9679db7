"""A small Keras model trained under MultiWorkerMirroredStrategy; every rank saves its final weights."""

from __future__ import annotations

from typing import Any


def keras_mwms_train(weights_dir: str, epochs: int = 4) -> dict[str, Any]:
    """Train a tiny regression on rank-dependent data; return the loss history and the strategy's view."""
    import json
    import os

    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    rng = np.random.default_rng(rank)  # each worker sees different data: only allreduce keeps them equal
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32"))[:, None]
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(8), tf.keras.layers.Dense(1)]
        )
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    import sparkrunner

    history = model.fit(data, epochs=epochs, verbose=0, callbacks=[sparkrunner.keras_callback()])
    np.savez(os.path.join(weights_dir, f"rank{rank}.npz"), *model.get_weights())
    return {
        "loss": [float(v) for v in history.history["loss"]],
        "replicas": int(strategy.num_replicas_in_sync),
        "keras": type(model).__module__,
    }
