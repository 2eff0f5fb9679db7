"""The pip requirements of a model an estimator logs to MLflow, named instead of inferred.

Left to itself, MLflow infers a logged model's requirements by loading the model again in a subprocess of its own
(``mlflow.utils._capture_modules``), which imports the model's framework once more: seconds of every tracked
``fit``. The estimators know what their models need: the flavor's framework, what the pickled model refers to,
and what the pyfunc wrapper (`sparkrunner_pyfunc`) imports. The versions are the training ranks' own (rank 0
reports them with its result, `installed_versions`), else the driver's; MLflow adds its own requirement.
"""

from __future__ import annotations

import importlib.metadata
import io
import pickle
import re
from collections.abc import Iterable, Mapping
from typing import Any

REPORTED = (
    "torch", "pytorch-lightning", "lightning", "tensorflow", "tensorflow-cpu", "tf-keras", "keras", "jax",
    "cloudpickle", "numpy", "pandas", "pyarrow", "sparkrunner",
)  # fmt: skip
"""The distributions whose versions rank 0 reports: those the estimators' models load with."""

WRAPPER = ("numpy", "pandas")
"""What `sparkrunner_pyfunc` imports besides MLflow."""

FLAVOR_MODULES = {
    "pytorch": ("torch", "cloudpickle"),  # the pytorch flavor's pickle module is cloudpickle
    "tensorflow": ("tensorflow", "tf_keras"),
}
"""The modules each flavor loads its model with (Keras 3's ``keras`` flavor adds its backend: `keras_modules`)."""

_DISTRIBUTIONS = {"tensorflow": ("tensorflow", "tensorflow-cpu")}
"""Modules installed under another distribution name than their own (tried in order)."""


def installed_versions() -> dict[str, str]:
    """The installed versions of the `REPORTED` distributions here (those missing are left out)."""
    return {name: version for name in REPORTED if (version := _version(name)) is not None}


def keras_modules() -> tuple[str, ...]:
    """Keras 3 and the backend it runs on (``tensorflow``, ``torch`` or ``jax``)."""
    import keras

    return ("keras", keras.backend.backend())


def loaded_with_modules(payload: bytes) -> tuple[Any, set[str]]:
    """`payload` (a pickle) unpickled, and the top-level modules of everything it refers to by name (the modules
    loading it imports: a Lightning module's package, sparkrunner's own wrappers, the user's installed package)."""
    found: set[str] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            found.add(module.split(".")[0])
            return super().find_class(module, name)

    return Recording(io.BytesIO(payload)).load(), found


def pip_requirements(modules: Iterable[str], rank_versions: Mapping[str, str]) -> list[str]:
    """``name==version`` for the distribution of each of `modules` and the wrapper's, sorted: the version rank 0
    reported, else the one installed here; a module no installed distribution provides (the standard library,
    a module on ``sys.path`` only) is left out. Local version labels are dropped (``2.13.0+cpu`` is not on PyPI),
    as MLflow's own pinned requirements drop them."""
    from packaging.version import Version

    reported = {_normalized(name): version for name, version in rank_versions.items()}
    pinned = {}
    for module in {*modules, *WRAPPER}:
        for name in map(_normalized, _DISTRIBUTIONS.get(module, (module,))):
            version = reported.get(name) or _version(name)
            if version is not None:
                pinned[name] = Version(version).public
                break
    return sorted(f"{name}=={version}" for name, version in pinned.items())


def _normalized(name: str) -> str:
    """A distribution's name as PyPI normalizes it (``tf_keras`` is ``tf-keras``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except (importlib.metadata.PackageNotFoundError, ValueError):  # ValueError: not a distribution's name
        return None
