"""Whether the installed Horovod was built with MPI: asked once per Horovod build on this machine.

Horovod's own answer (`horovod.common.util.mpi_built`) loads each framework's extension in a new process
(TensorFlow's, then torch's): seconds, 8-10 s on a busy 2-core driver, paid by every new driver process (a notebook
kernel, a spark-submit job) before its first mpirun run. A yes is kept in the user's cache folder, keyed by this
interpreter and the Horovod build (its compiled extensions' paths, sizes and times): a reinstall asks again. A no
is not kept (a probe that failed for a passing reason must not stick).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path


def cache_folder() -> Path:
    """$XDG_CACHE_HOME/sparkrunner, else ~/.cache/sparkrunner."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkrunner"


@functools.cache
def horovod_has_mpi() -> bool:
    """True when Horovod is installed here and was built with MPI support."""
    package = _horovod_package()
    if package is None:
        return False
    known = cache_folder() / f"horovod-has-mpi-{_build_key(package)}"
    if known.exists():
        return True
    if not _probe():
        return False
    with contextlib.suppress(OSError):  # a read-only home only costs the next process the probe
        known.parent.mkdir(parents=True, exist_ok=True)
        known.touch()
    return True


def _horovod_package() -> Path | None:
    spec = importlib.util.find_spec("horovod")  # (finds it without importing it)
    return None if spec is None or spec.origin is None else Path(spec.origin).parent


def _build_key(package: Path) -> str:
    extensions = sorted(package.rglob("*.so"))
    facts = [
        sys.executable,
        *(f"{p.relative_to(package)} {p.stat().st_size} {p.stat().st_mtime_ns}" for p in extensions),
    ]
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]


def _probe() -> bool:
    """Horovod's own answer (False when it cannot give one)."""
    try:
        from horovod.common.util import mpi_built

        return bool(mpi_built())
    except Exception:
        return False
