"""A rank-side function named by its module, so that the driver hands it to `Runner.run` without importing it.

Rank code must not be imported by the driver (tests/layout/test_module_graph.py); the function is imported
where it runs, in the rank.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RankEntry:
    """``module.function``, imported and called in the rank process."""

    module: str
    function: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(self.module), self.function)(*args, **kwargs)

    @property
    def __name__(self) -> str:  # the run's name in logs, MLflow and Spark's UI
        return self.function
