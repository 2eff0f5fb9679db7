"""TensorFlow wiring: `TF_CONFIG` for MultiWorkerMirroredStrategy, the Keras that trains under it, and the backend
Keras 3 trains on instead."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Mapping

from sparkrunner.common.environment import Env
from sparkrunner.errors import KerasStrategyError
from sparkrunner.topology import PortUse, Topology

KERAS3_BACKEND = "torch"
"""The Keras 3 backend sparkrunner trains data-parallel with (`KERAS_BACKEND`): Keras 3's fit under
MultiWorkerMirroredStrategy is broken upstream (keras-team/keras#20585); on the torch backend a Keras 3 model
is a torch.nn.Module whose gradients torch.distributed averages (sparkrunner.ranks.keras_data_parallel)."""

LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
"""TensorFlow resolves `tf.keras` to tf_keras (Keras 2) when it is "1", to Keras 3 otherwise (TF >= 2.16)."""

UPSTREAM_BUG = "keras-team/keras#20585"

WAYS_OUT = (
    "train with tf_keras (TF_USE_LEGACY_KERAS=1, sparkrunner's default on the ranks when tf_keras is installed "
    "and neither it nor KERAS_BACKEND is set), or with Keras 3 on its torch backend without a strategy "
    "(Runner(env={'KERAS_BACKEND': 'torch'}) and model = sparkrunner.keras_data_parallel(model)); "
    "see docs/tensorflow.md"
)


def environment(topology: Topology, index: int) -> dict[str, str]:
    import json  # (here: a rank's start does not need it)

    workers = [f"{peer.host}:{peer.ports[PortUse.TF_WORKER]}" for peer in topology.peers]
    config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    return {"TF_CONFIG": json.dumps(config)}


def defaults(env: Mapping[str, str]) -> dict[str, str]:
    """For a rank whose environment (inherited and `env=`) is `env`: tf_keras as `tf.keras`, unless the code
    chose its Keras (`TF_USE_LEGACY_KERAS` or `KERAS_BACKEND` set: Keras 3 then). Keras 3's model.fit fails
    under MultiWorkerMirroredStrategy (TF 2.21, keras-team/keras#20585); tf_keras trains there, and
    `import keras` stays Keras 3. `Env.LEGACY_KERAS` marks the choice as sparkrunner's, for `announce_legacy_keras`."""
    if LEGACY_KERAS in env or "KERAS_BACKEND" in env or importlib.util.find_spec("tf_keras") is None:
        return {}
    return {LEGACY_KERAS: "1", Env.LEGACY_KERAS: "1"}


def announce_legacy_keras(rank: int, say: Callable[[str], None]) -> None:
    """On rank 0 of a run where sparkrunner chose tf_keras: say so once, when the rank loads tf_keras."""
    from sparkrunner.frameworks.after_import import after_import

    if rank == 0 and os.environ.get(Env.LEGACY_KERAS) == "1" and os.environ.get(LEGACY_KERAS) == "1":
        after_import("tf_keras", lambda _module: say(LEGACY_KERAS_NOTE))


LEGACY_KERAS_NOTE = (
    "sparkrunner: tf.keras is tf_keras (Keras 2) on the ranks: TF_USE_LEGACY_KERAS=1 is sparkrunner's default "
    f"there, as Keras 3 cannot fit under MultiWorkerMirroredStrategy ({UPSTREAM_BUG}); set TF_USE_LEGACY_KERAS "
    "or KERAS_BACKEND (Runner(env=...)) to choose the Keras yourself (docs/tensorflow.md)"
)

_PER_REPLICA = re.compile(r"PerReplica.*to a Tensor", re.DOTALL)
_KERAS3_FILE = re.compile(r"[\\/]keras[\\/]src[\\/]")
"""Keras 3's own modules (keras/src/...; tf_keras's are tf_keras/src/...)."""


def explained(exc: BaseException) -> BaseException:
    """`exc`, or a short `KerasStrategyError` caused by it when it is Keras 3 failing under a
    tf.distribute strategy (TensorFlow's long "PerReplica ... to a Tensor" message)."""
    if not _PER_REPLICA.search(str(exc)) or not _raised_in_keras3(exc):
        return exc
    error = KerasStrategyError(
        f"Keras 3's fit cannot run under MultiWorkerMirroredStrategy ({UPSTREAM_BUG}, TensorFlow's "
        f"'{type(exc).__name__}: Attempt to convert a value (PerReplica...) to a Tensor' above): {WAYS_OUT}"
    )
    error.__cause__ = exc
    return error


def _raised_in_keras3(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if _KERAS3_FILE.search(tb.tb_frame.f_code.co_filename):
            return True
        tb = tb.tb_next
    return False
