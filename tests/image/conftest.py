"""The image tests run under `make image-test` (after `make image`), not in the main suite: building the image
takes tens of minutes on vfs storage, more than CI's budget allows on top of the suite."""

from __future__ import annotations

import os

IMAGE_TESTS_ENV = "SPARKRUNNER_IMAGE_TESTS"

if os.environ.get(IMAGE_TESTS_ENV) != "1":
    collect_ignore_glob = ["test_*.py"]


def pytest_report_header() -> str | None:
    if os.environ.get(IMAGE_TESTS_ENV) != "1":
        return f"tests/image skipped: run `make image-test` ({IMAGE_TESTS_ENV}=1) to build and test the image"
    return None
