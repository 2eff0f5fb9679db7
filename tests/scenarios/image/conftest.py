"""The image tests need the image of this tree, which scripts/run_tests.sh (`make test`, after the main suite) and
`make image-test` build first (docker/build_image.sh); so a plain pytest run leaves them out."""

from __future__ import annotations

import os

IMAGE_TESTS_ENV = "SPARKRUNNER_IMAGE_TESTS"

if os.environ.get(IMAGE_TESTS_ENV) != "1":
    collect_ignore_glob = ["test_*.py"]


def pytest_report_header() -> str | None:
    if os.environ.get(IMAGE_TESTS_ENV) != "1":
        return f"tests/scenarios/image left out: `make image-test` ({IMAGE_TESTS_ENV}=1) builds and tests the image"
    return None
