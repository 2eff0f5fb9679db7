"""Run code on a framework's module once the rank imports it (now, if it already has), so a rank that never does
pays nothing: the collective timing, the Trainer's progress callback, JAX's cluster registration."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import importlib.abc


def after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """Call `then(module)` for module `name`: now if it is imported, else right after its import."""
    if name in sys.modules:
        then(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, then))


class _AfterImport:
    """Lets the other finders find module `name`, runs it, then calls `then(module)`; once, when it is imported
    (not when it is only looked for). A finder and loader by its methods alone: `importlib.abc` (its base classes)
    would cost every rank's start its imports (`importlib.resources`, `tempfile`)."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self._name, self._then = name, then
        self._loader: Any = None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._name:
            return None
        # out of the way while the other finders look (they would ask it again), back for the next lookup: a
        # probe (`importlib.util.find_spec`, as TensorFlow makes for tf_keras) imports nothing
        place = sys.meta_path.index(self)
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(place, self)
        if spec is not None and spec.loader is not None:
            self._loader, spec.loader = spec.loader, cast("importlib.abc.Loader", self)
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self._loader.exec_module(module)
        self._then(module)
