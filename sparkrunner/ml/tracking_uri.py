"""MLflow's tracking URI switched for one call and restored as the user had it, environment variable included."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

_VARIABLE = "MLFLOW_TRACKING_URI"


@contextlib.contextmanager
def tracking_uri_for_call(uri: str) -> Iterator[None]:
    """Point MLflow's fluent API at `uri` inside the block only. MLflow's own `_use_tracking_uri` unsets
    ``MLFLOW_TRACKING_URI`` on the way out when no URI was set in code, which would move the user's later runs
    to ./mlflow.db; the variable is put back as it was."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    before = os.environ.get(_VARIABLE)
    try:
        with _use_tracking_uri(uri):
            yield
    finally:
        if before is None:
            os.environ.pop(_VARIABLE, None)
        else:
            os.environ[_VARIABLE] = before
