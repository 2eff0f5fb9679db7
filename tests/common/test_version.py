"""sparkrunner's version lives in a module of its own (`sparkrunner.common.version`), the package's facade and
the ranks read it there; the oracle is the version pyproject.toml declares."""

from __future__ import annotations

import tomllib

import sparkrunner
from sparkrunner.common import version
from tests.helpers import ROOT


def test_the_version_is_the_declared_one_everywhere() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version.__version__ == sparkrunner.__version__ == declared
