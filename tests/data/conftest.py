"""Data-path fixtures: the Petastorm cases that run in .venv-petastorm noted as collected (the S3-API server,
`s3`, is tests/conftest.py's: checkpoints use it too)."""

from __future__ import annotations

import pytest

from tests.data.readers import note_petastorm_cases


@pytest.hookimpl(trylast=True)  # after -k and -m deselected theirs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    note_petastorm_cases(items)
