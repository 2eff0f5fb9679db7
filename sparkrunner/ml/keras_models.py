"""Keras models between processes, for the driver, the ranks and the executors alike: the model's package
(``tf_keras`` or Keras 3's ``keras``), its JSON architecture and its weights, pickled as a call that rebuilds it;
and the forward pass scoring uses."""

from __future__ import annotations

import importlib
from typing import Any

import cloudpickle
import numpy as np


def package_of(model: Any) -> str | None:
    """``"tf_keras"`` or ``"keras"`` for a Keras model, None for anything else."""
    for cls in type(model).__mro__:
        top = cls.__module__.split(".")[0]
        if cls.__name__ == "Model" and top in ("tf_keras", "keras"):
            return top
    return None


class _Rebuild:
    """Pickles as ``rebuilt(package, architecture, weights)``: unpickling it gives the Keras model itself."""

    def __init__(self, package: str, architecture: str, weights: list[np.ndarray]) -> None:
        self.args = (package, architecture, weights)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return rebuilt, self.args


def packed(model: Any) -> bytes:
    """`model` as bytes that load back (``cloudpickle.loads``) into the same architecture and weights."""
    package = package_of(model)
    assert package is not None, "packed() takes a Keras model"
    return bytes(cloudpickle.dumps(_Rebuild(package, model.to_json(), model.get_weights())))


def rebuilt(package: str, architecture: str, weights: list[np.ndarray]) -> Any:
    """A new Keras model of `package` from its JSON architecture, holding `weights`."""
    keras = importlib.import_module(package)
    model = keras.models.model_from_json(architecture)
    model.set_weights(weights)
    return model


def predict(model: Any, x: np.ndarray) -> np.ndarray:
    """The model's outputs for a float32 feature matrix (a forward pass, no progress bar)."""
    return np.asarray(model(x, training=False))
