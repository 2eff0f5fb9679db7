"""The pip requirements of a model an estimator logs to MLflow, named instead of inferred.

Left to itself, MLflow infers a logged model's requirements by loading the model again in a subprocess of its own
(``mlflow.utils._capture_modules``), which imports the model's framework once more: seconds of every tracked
``fit``. The estimators know what their models load with: the flavor's framework, the modules the pickled model
refers to and those the model's own code imports, and what the pyfunc wrapper (`sparkrunner_pyfunc`) imports.
Each module is named by the distributions that provide it (``importlib.metadata.packages_distributions``:
``sklearn`` is ``scikit-learn``, ``PIL`` is ``pillow``, a user's package its own distribution). The versions are
the training ranks' own (rank 0 reports those of every distribution it imported, `installed_versions`), else the
driver's; MLflow adds its own requirement.
"""

from __future__ import annotations

import functools
import importlib.metadata
import io
import logging
import pickle
import re
import sys
import types
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)

WRAPPER = ("numpy", "pandas")
"""What `sparkrunner_pyfunc` imports besides MLflow."""

FLAVOR_MODULES = {
    "pytorch": ("torch", "cloudpickle"),  # the pytorch flavor's pickle module is cloudpickle
    "tensorflow": ("tensorflow", "tf_keras"),
}
"""The modules each flavor loads its model with (Keras 3's ``keras`` flavor adds its backend: `keras_modules`)."""


@functools.lru_cache(maxsize=1)
def providers() -> Mapping[str, list[str]]:
    """Top-level module -> the installed distributions that provide it (read once a process: ~0.3 s)."""
    return importlib.metadata.packages_distributions()


def installed_versions() -> dict[str, str]:
    """The installed versions of the distributions that provide the modules this process imported (on rank 0:
    those the model was trained with, a superset of those it loads with)."""
    names = {name for module in _top_level(sys.modules) for name in providers().get(module, ())}
    return {_normalized(name): version for name in names if (version := _version(name)) is not None}


def keras_modules() -> tuple[str, ...]:
    """Keras 3 and the backend it runs on (``tensorflow``, ``torch`` or ``jax``)."""
    import keras

    return ("keras", keras.backend.backend())


def loaded_with_modules(payload: bytes) -> tuple[Any, set[str]]:
    """`payload` (a pickle) unpickled, and the top-level modules it loads with: those of everything it refers to
    by name (a Lightning module's package, sparkrunner's own wrappers, the user's installed package) and those
    the code of the user's own modules imports (a module no distribution provides, or a class pickled by
    value: what its functions' globals name)."""
    named: set[str] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            named.add(module)
            return super().find_class(module, name)

    model = Recording(io.BytesIO(payload)).load()
    own = [vars(m) for name in named if (m := sys.modules.get(name)) is not None and not _distributed(name)]
    by_value = [f.__globals__ for f in _functions_of(type(model))]
    found = _top_level(named) | _top_level(_names_in([*own, *by_value]))
    return model, found | _imported_by_packages(found)


def _imported_by_packages(packages: set[str]) -> set[str]:
    """The top-level modules the loaded modules of `packages` name in their globals: what importing them imports
    (``sklearn`` imports ``scipy`` and ``rich``), as MLflow's inference records it. Installed packages only (the
    user's own modules count by what the model's classes name, above), one level (not what those import in turn:
    their own distributions require it), and not sparkrunner's (its driver-side modules name pyspark, which a
    served model never imports)."""
    expanded = {name for name in packages if name in providers()} - {"sparkrunner"}
    loaded = [
        vars(m) for name, m in list(sys.modules.items()) if m is not None and name.split(".")[0] in expanded
    ]
    return _top_level(_names_in(loaded))


def pip_requirements(modules: Iterable[str], rank_versions: Mapping[str, str]) -> list[str]:
    """``name==version`` for the distributions that provide each of `modules` and the wrapper's, sorted: the
    version rank 0 reported, else the one installed here. A module no installed distribution provides (a module
    on ``sys.path`` only) is left out, and the log says so; the standard library is no requirement. Local version
    labels are dropped (``2.13.0+cpu`` is not on PyPI), as MLflow's own pinned requirements drop them."""
    from packaging.version import Version

    reported = {_normalized(name): version for name, version in rank_versions.items()}
    pinned, unprovided = {}, []
    for module in sorted({*modules, *WRAPPER} - set(sys.stdlib_module_names) - {"__main__", "builtins"}):
        names = [_normalized(n) for n in providers().get(module, ())]
        found = {name: version for name in names if (version := reported.get(name) or _version(name))}
        pinned.update({name: Version(version).public for name, version in found.items()})
        if not found:
            unprovided.append(module)
    if unprovided:
        log.warning(
            "the logged model's requirements leave out %s: no installed distribution provides them; add what "
            "provides them where the model is served with mlflow.models.update_model_requirements",
            ", ".join(unprovided),
        )
    return sorted(f"{name}=={version}" for name, version in pinned.items())


def _top_level(names: Iterable[str]) -> set[str]:
    return {name.split(".")[0] for name in names if not name.startswith("_")}


def _distributed(module: str) -> bool:
    return module.split(".")[0] in providers() or module.split(".")[0] in sys.stdlib_module_names


def _functions_of(cls: type) -> list[Any]:
    """The functions of `cls` and its bases that were pickled by value (their module is not importable)."""
    return [
        value
        for klass in cls.__mro__
        if klass.__module__ not in sys.modules
        for value in vars(klass).values()
        if isinstance(value, types.FunctionType)
    ]


def _names_in(namespaces: Iterable[dict[str, Any]]) -> set[str]:
    """The modules the values of `namespaces` (module or function globals) are or come from."""
    found = set()
    with warnings.catch_warnings():  # a deprecated alias warns when looked at (torch.distributed.reduce_op)
        warnings.simplefilter("ignore")
        for namespace in namespaces:
            for value in list(namespace.values()):
                owner = _module_of(value)
                if owner is not None and owner.split(".")[0] in sys.modules:  # not Cython's "View" and such
                    found.add(owner)
    return found


def _module_of(value: Any) -> str | None:
    try:
        owner = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
    except Exception:  # a lazy module that refuses attributes (TensorFlow's Keras 3 stand-ins raise)
        return None
    return owner if isinstance(owner, str) else None


def _normalized(name: str) -> str:
    """A distribution's name as PyPI normalizes it (``tf_keras`` is ``tf-keras``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except (importlib.metadata.PackageNotFoundError, ValueError):  # ValueError: not a distribution's name
        return None
