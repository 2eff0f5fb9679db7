"""PYTHONPATH for a rank: the user's entries first (`Runner(env=...)`, then the inherited value), then what the
spawning interpreter imports from. Which other variables `env=` may set is checked with the options
(`sparkrunner.options.check_user_env`); the table is docs/environment.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable


def python_path(explicit: Iterable[str | None]) -> str:
    """PYTHONPATH for a rank: the entries of the `explicit` values (the user's env=, then the inherited one)
    first, then what the spawning interpreter imports from (py-files, notebook folders); each entry once."""
    entries = [p for value in explicit if value for p in value.split(os.pathsep)]
    return os.pathsep.join(dict.fromkeys(p for p in [*entries, *sys.path] if p))
