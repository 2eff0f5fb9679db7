"""Data-path fixtures: a real S3-API server (moto) for the whole test run; the Petastorm cases that run in
.venv-petastorm noted as collected."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.data.readers import note_petastorm_cases
from tests.data.s3_server import S3Server, s3_server


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """moto in server mode on 127.0.0.1 and a free port, with a bucket for the tests."""
    with s3_server() as server:
        yield server


@pytest.hookimpl(trylast=True)  # after -k and -m deselected theirs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    note_petastorm_cases(items)
