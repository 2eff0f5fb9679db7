"""Horovod tests: skipped as a folder when Horovod is not installed (scripts/setup.sh builds it)."""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("horovod") is None:
    collect_ignore_glob = ["test_*.py"]


def pytest_report_header() -> str | None:
    if importlib.util.find_spec("horovod") is None:
        return "tests/frameworks/horovod skipped: Horovod is not installed (run scripts/setup.sh, which builds it)"
    return None
