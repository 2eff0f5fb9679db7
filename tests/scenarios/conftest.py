"""Fixtures of the scenarios: the fault scenarios and the two-host faults."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.scenarios.faults.leftovers import use_private_temp_dir


@pytest.fixture
def private_temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The driver's temp dir is the test's own (restored afterwards): its listing shows this test's runs only."""
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", ""))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    use_private_temp_dir(tmp_path / "tmp")
    return tmp_path / "tmp"
