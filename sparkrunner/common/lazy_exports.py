"""The public packages' lazy imports: a rank, or a plain install, loads only the names it uses."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from sparkrunner.common.extras import missing_extra


def lazy_exports(package: str, table: dict[str, str]) -> Callable[[str], Any]:
    """A package's module-level ``__getattr__`` that imports each name of `table` (name -> module) on first use
    and keeps it; an optional dependency missing there raises `MissingExtraError` naming its extra. Packages
    import their public names this way so that a rank, or a plain install, loads only what it uses."""

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            module = importlib.import_module(table[name])
        except ModuleNotFoundError as exc:
            raise missing_extra(f"{package}.{name}", exc) from exc
        value = getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
