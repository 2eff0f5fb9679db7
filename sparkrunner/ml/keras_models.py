"""Keras models between processes, for the driver, the ranks and the executors alike: the model's package
(``tf_keras`` or Keras 3's ``keras``), its JSON architecture and its weights, pickled as a call that rebuilds it;
the shapes its inputs take (the feature matrix is reshaped to them, as Horovod does); and the forward pass
scoring uses."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from typing import Any

import cloudpickle
import numpy as np

from sparkrunner.ml import features


def package_of(model: Any) -> str | None:
    """``"tf_keras"`` or ``"keras"`` for a Keras model, None for anything else."""
    for cls in type(model).__mro__:
        top = cls.__module__.split(".")[0]
        if cls.__name__ == "Model" and top in ("tf_keras", "keras"):
            return top
    return None


CustomObjects = dict[str, Any]
"""Keras' ``custom_objects``: the functions and classes a model's architecture names (a custom activation, layer,
...), by the name it names them."""


class _Rebuild:
    """Pickles as ``rebuilt(package, architecture, weights, custom_objects)``: unpickling it gives the Keras model
    itself, wherever it is unpickled (a rank, the driver, a scoring worker), its custom objects travelling along."""

    def __init__(
        self, package: str, architecture: str, weights: list[np.ndarray], custom_objects: CustomObjects
    ) -> None:
        self.args = (package, architecture, weights, custom_objects)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return rebuilt, self.args


def packed(
    model: Any, custom_objects: CustomObjects | None = None, weights: list[np.ndarray] | None = None
) -> bytes:
    """`model` as bytes that load back (``cloudpickle.loads``) into the same architecture and `weights` (default:
    the model's own), without its compile settings (a fit compiles it again; a function metric in them would be
    needed wherever it loads); `custom_objects` and the registered objects the architecture names go along."""
    package = package_of(model)
    assert package is not None, "packed() takes a Keras model"
    architecture = _uncompiled(model.to_json())
    objects = {**registered_in(package, architecture), **(custom_objects or {})}
    held = model.get_weights() if weights is None else weights
    return bytes(cloudpickle.dumps(_Rebuild(package, architecture, held, objects)))


def rebuilt(
    package: str, architecture: str, weights: list[np.ndarray], custom_objects: CustomObjects | None = None
) -> Any:
    """A new Keras model of `package` from its JSON architecture, holding `weights`."""
    keras = importlib.import_module(package)
    model = keras.models.model_from_json(architecture, custom_objects=custom_objects or None)
    model.set_weights(weights)
    return model


def registered_in(package: str, architecture: str) -> CustomObjects:
    """The objects registered with Keras (``register_keras_serializable``) that `architecture` names: a process
    that did not run the registration (a rank, a scoring worker) gets them this way."""
    registry = importlib.import_module(package).saving.get_custom_objects()
    return {name: obj for name, obj in registry.items() if f'"{name}"' in architecture}


def _uncompiled(architecture: str) -> str:
    """A Keras 3 model's JSON without its ``compile_config`` (tf_keras' JSON has none)."""
    config = json.loads(architecture)
    if "compile_config" not in config:
        return architecture
    config.pop("compile_config")
    return json.dumps(config)


Shape = tuple[int, ...]

BACKEND_BOUND = {
    "TFSMLayer": "tensorflow",
    "JaxLayer": "jax",
    "FlaxLayer": "jax",
    "TorchModuleWrapper": "torch",
}
"""Keras 3 layers that wrap one backend's own code (a SavedModel, a JAX or torch function): they run on that
backend only."""


def input_shapes(model: Any) -> list[Shape] | None:
    """Each model input's shape without the batch axis (``[(28, 28, 1)]``), or None where the model does not
    say (a subclassed model) or an axis is left open: then the feature matrix is fed as it is."""
    inputs = getattr(model, "inputs", None)
    if not inputs:
        return None
    shapes = [tuple(tensor.shape[1:]) for tensor in inputs]
    if any(size is None for shape in shapes for size in shape):
        return None
    return [tuple(int(size) for size in shape) for shape in shapes]


def fed(shapes: Sequence[Shape] | None, matrix: np.ndarray) -> Any:
    """A ``(rows, width)`` matrix as a model takes it: split into one block per shape (in order), each block
    reshaped to ``(rows, *shape)``; one array for one shape, a tuple for several; the matrix itself for None."""
    if not shapes:
        return matrix
    blocks = features.split(matrix, shapes)
    return blocks[0] if len(blocks) == 1 else tuple(blocks)


def foreign_layer(model: Any, backend: str) -> str | None:
    """The first layer of a Keras 3 `model` that only another backend than `backend` can run, described."""
    for layer in model._flatten_layers(include_self=False, recursive=True):
        bound = BACKEND_BOUND.get(type(layer).__name__)
        if bound is not None and bound != backend:
            return f"layer {layer.name!r} ({type(layer).__name__}) runs on the {bound} backend only"
    return None


def predict(model: Any, x: np.ndarray) -> np.ndarray:
    """The model's outputs for a float32 feature matrix, fed in the model's input shapes (a forward pass, no
    progress bar). Keras 3's outputs go through its own conversion: on the torch backend they are tensors that
    carry gradients, which NumPy cannot take as they are."""
    outputs = model(fed(input_shapes(model), x), training=False)
    if package_of(model) == "keras":
        outputs = importlib.import_module("keras").ops.convert_to_numpy(outputs)
    return np.asarray(outputs)
