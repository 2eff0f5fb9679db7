"""A pytest plugin for the run of the Petastorm cases in .venv-petastorm (tests/data/readers.py): writes each case's
outcome, and the report of a case that did not pass, as JSON to the file $SPARKRUNNER_PETASTORM_REPORT names,
for the same case in the main environment to pass, skip or fail with."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

_OUTCOMES: dict[str, dict[str, str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A case fails if any phase failed (its setup, call or teardown), else is skipped if one was skipped."""
    case = _OUTCOMES.setdefault(report.nodeid, {"outcome": "passed", "details": ""})
    if report.passed or case["outcome"] == "failed":
        return
    if report.failed:
        sections = "".join(f"\n--- {name} ---\n{text}" for name, text in report.sections)
        case.update(
            outcome="failed", details=f"{case['details']}[{report.when}] {report.longreprtext}{sections}"
        )
    elif case["outcome"] == "passed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        case.update(outcome="skipped", details=reason)


def pytest_sessionfinish(session: pytest.Session) -> None:
    Path(os.environ["SPARKRUNNER_PETASTORM_REPORT"]).write_text(json.dumps(_OUTCOMES))
