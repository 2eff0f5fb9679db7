"""TensorFlow wiring: `TF_CONFIG` for MultiWorkerMirroredStrategy, the Keras that trains under it, and the backend
Keras 3 trains on instead."""

from __future__ import annotations

import importlib.util
import json

from sparkrunner.topology import PortUse, Topology

KERAS3_BACKEND = "torch"
"""The Keras 3 backend sparkrunner trains data-parallel with (`KERAS_BACKEND`): Keras 3's fit under
MultiWorkerMirroredStrategy is broken upstream (keras-team/keras#20585); on the torch backend a Keras 3 model
is a torch.nn.Module whose gradients torch.distributed averages (sparkrunner.ranks.keras_data_parallel)."""


def environment(topology: Topology, index: int) -> dict[str, str]:
    workers = [f"{peer.host}:{peer.ports[PortUse.TF_WORKER]}" for peer in topology.peers]
    config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    return {"TF_CONFIG": json.dumps(config)}


def defaults() -> dict[str, str]:
    """Keras 3's model.fit fails under MultiWorkerMirroredStrategy on CPU (TF 2.21); tf_keras trains correctly,
    and `tf.keras` resolves to it when TF_USE_LEGACY_KERAS is set (`import keras` stays Keras 3)."""
    return {"TF_USE_LEGACY_KERAS": "1"} if importlib.util.find_spec("tf_keras") is not None else {}
