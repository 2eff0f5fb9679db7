"""TensorFlow wiring: `TF_CONFIG` for MultiWorkerMirroredStrategy, and the Keras that trains under it."""

from __future__ import annotations

import importlib.util
import json

from sparkrunner.topology import Topology

# ports[0] is torch's MASTER_PORT on peer 0; ports[1] is every peer's own TF gRPC worker port.
_TF_PORT_INDEX = 1


def environment(topology: Topology, index: int) -> dict[str, str]:
    workers = [f"{peer.host}:{peer.ports[_TF_PORT_INDEX]}" for peer in topology.peers]
    config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    env = {"TF_CONFIG": json.dumps(config)}
    if importlib.util.find_spec("tf_keras") is not None:
        # Keras 3's model.fit fails under MultiWorkerMirroredStrategy on CPU (TF 2.21); tf_keras trains
        # correctly, and `tf.keras` resolves to it when this is set (`import keras` stays Keras 3).
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env
