"""The optional dependencies and the extra of ``pip install 'sparkrunner[EXTRA]'`` that brings each, and the
error that names it when an import of one fails."""

from __future__ import annotations

from sparkrunner.errors import MissingExtraError

EXTRAS = {
    "numpy": "data",
    "pyarrow": "data",
    "pandas": "data",
    "torch": "torch",
    "tensorflow": "tensorflow",
    "mlflow": "mlflow",
    "tqdm": "progress",
    "horovod": "horovod",
    "petastorm": "petastorm",
}
"""Each optional dependency and the extra of `pip install 'sparkrunner[EXTRA]'` that brings it."""


def missing_extra(feature: str, exc: ModuleNotFoundError) -> ImportError:
    """The error to raise when `feature` failed to import an optional dependency: `MissingExtraError` naming the
    extra, or `exc` itself when what is missing is no dependency of an extra."""
    top = (exc.name or "").split(".")[0]
    if top not in EXTRAS:
        return exc
    return MissingExtraError(
        f"{feature} needs {top}, which is not installed here: pip install 'sparkrunner[{EXTRAS[top]}]'"
    )
