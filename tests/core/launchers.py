"""The launchers a behaviour test runs under, each skipped with its reason where it cannot run here."""

from __future__ import annotations

import pytest

from sparkrunner.errors import LauncherUnavailableError
from sparkrunner.launch import resolve_launcher


def _param(name: str) -> object:
    try:
        resolve_launcher(name).check_available()
    except LauncherUnavailableError as exc:
        return pytest.param(name, marks=pytest.mark.skip(reason=str(exc)))
    return name


LAUNCHERS = [_param("direct"), _param("mpirun")]
