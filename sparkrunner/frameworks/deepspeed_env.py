"""DeepSpeed wiring: no build of an op waits on a lock its killed builder left.

DeepSpeed compiles its ops with torch's JIT (``torch.utils.cpp_extension.load``), which takes a build lock first:
a ``lock`` file beside the op's build folder (``torch.utils.file_baton.FileBaton``), created exclusively and held
open until the build ends, then removed. A rank stopped or killed halfway through the build leaves the file, and
every later build of that op, on any rank, waits on it for good. So once a rank imports DeepSpeed, the locks under
torch's extension cache that no process holds open, and that are older than ``BUILD_LOCK_MIN_AGE_S`` (a builder
closes the file a moment before it removes it), are removed first. Only this machine's processes are seen: a cache
on a filesystem other machines build into too is left as it is (``TORCH_EXTENSIONS_DIR`` names a local one).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from types import ModuleType

from sparkrunner import timeouts
from sparkrunner.frameworks.after_import import after_import

log = logging.getLogger(__name__)


def remove_stale_build_locks_on_import() -> None:
    """In the rank: sweep torch's extension cache once (and if) it imports DeepSpeed."""
    after_import("deepspeed", _sweep)


def _sweep(_deepspeed: ModuleType) -> None:
    remove_stale_build_locks()


def remove_stale_build_locks(root: Path | None = None, min_age_s: float | None = None) -> list[Path]:
    """Remove the build locks under `root` (torch's extension cache) that no process here holds open and that
    are at least `min_age_s` old; the removed ones."""
    root = root if root is not None else _extensions_root()
    min_age = timeouts.BUILD_LOCK_MIN_AGE_S if min_age_s is None else min_age_s
    locks = [*root.glob("*/lock"), *root.glob("*/*/lock")]
    if not locks:
        return []
    held = _open_files()
    removed = []
    for lock in locks:
        with contextlib.suppress(FileNotFoundError):
            if time.time() - lock.stat().st_mtime >= min_age and str(lock.resolve()) not in held:
                lock.unlink()
                removed.append(lock)
                log.warning("removed %s: a torch extension build lock its killed builder left", lock)
    return removed


def _extensions_root() -> Path:
    """Where torch builds extensions: ``TORCH_EXTENSIONS_DIR``, else torch's default (``~/.cache/torch_extensions``)."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    from torch.utils.cpp_extension import get_default_build_root

    return Path(get_default_build_root())


def _open_files() -> set[str]:
    """The paths every process on this machine that we may look at has open (``/proc/PID/fd``)."""
    found = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):  # a process that ended, or another user's
            for fd in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    found.add(os.readlink(fd))
    return found
