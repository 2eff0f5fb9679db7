"""Keras 3 across processes with its JAX backend: `keras.distribution.initialize()` with no arguments (JAX finds
sparkrunner's coordinator) and `DataParallel` over every process's device. (Keras 3 on the TensorFlow backend
does not train under MultiWorkerMirroredStrategy on CPU with TF 2.21; `tf_keras` does: tests/frameworks/tensorflow.)"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrunner import Runner

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def data_parallel_fit() -> dict[str, Any]:
    """One rank: fit a dense layer on this rank's own data (already sharded: no auto-sharding), its batches
    joined into global ones by Keras."""
    import os

    os.environ["KERAS_BACKEND"] = "jax"
    import jax
    import keras
    import numpy as np

    keras.distribution.initialize()
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
    )
    keras.utils.set_random_seed(7)  # the same initial weights everywhere
    x = np.random.default_rng(int(os.environ["RANK"])).normal(size=(32, 4)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    history = model.fit(x, x.sum(axis=1, keepdims=True), batch_size=8, epochs=2, verbose=0, shuffle=False)
    return {
        "rank": int(os.environ["RANK"]),
        "process_index": jax.process_index(),
        "devices": len(devices),
        "loss": history.history["loss"],
        "weights": [float(v) for w in model.get_weights() for v in np.ravel(w)],
    }


def test_jax_backend_data_parallel_np_below_zero_direct() -> None:
    """One cell: what the launcher and the placement decide reaches Keras only through
    `keras.distribution.initialize()`, which calls `jax.distributed.initialize()` with no coordinator, process
    count or id, as tests/frameworks/test_jax.py does on every launcher and placement; Keras' `DataParallel`
    reads only JAX's devices."""
    views = Runner(np=-2, launcher="direct", tracking=False).run_all(data_parallel_fit)
    for view in views:
        assert view["process_index"] == view["rank"] and view["devices"] == len(views), view
        assert view["weights"] == views[0]["weights"], "replicas diverged"
        assert view["loss"][-1] < view["loss"][0], view
