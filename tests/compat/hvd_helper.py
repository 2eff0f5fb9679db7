"""A user's own module that hides Horovod from the function that calls it (as a training library would)."""

from __future__ import annotations

import importlib


def horovod_size() -> int:
    """hvd.init() and the size, reached through a module the calling function does not name."""
    hvd = importlib.import_module("horovod.torch")
    hvd.init()
    return int(hvd.size())
