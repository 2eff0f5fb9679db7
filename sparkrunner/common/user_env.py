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
    first, then what the spawning interpreter imports from (py-files, notebook folders); each entry once, less
    the Java archives that hold no Python code (`holds_no_python`)."""
    entries = [p for value in explicit if value for p in value.split(os.pathsep)]
    unique = dict.fromkeys(p for p in [*entries, *sys.path] if p)
    return os.pathsep.join(p for p in unique if not holds_no_python(p))


_NO_PYTHON: dict[tuple[str, int, int], bool] = {}
"""(jar, size, mtime) -> whether it holds no Python code: read once per process."""


def holds_no_python(entry: str) -> bool:
    """A Java archive without one Python file in it: Spark puts spark-core's jar (16 MB, ~6,000 entries) on its
    Python workers' PYTHONPATH, and every Python process started with it reads the whole archive's directory at
    its first import (0.05 s on 2026-11-28's machine) for nothing it could import. Archives with Python code (a
    `--packages` jar that ships its Python API) stay."""
    if not entry.endswith(".jar"):
        return False
    try:
        stat = os.stat(entry)
    except OSError:
        return False
    key = (entry, stat.st_size, stat.st_mtime_ns)
    if key not in _NO_PYTHON:
        _NO_PYTHON[key] = not _has_python(entry)
    return _NO_PYTHON[key]


def _has_python(archive_path: str) -> bool:
    import zipfile  # (here: only a jar on the path needs it)

    try:
        with zipfile.ZipFile(archive_path) as archive:
            return any(name.endswith((".py", ".pyc")) for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return True  # unreadable here: left as it was
