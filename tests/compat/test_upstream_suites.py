"""Each drop-in passes its original's public-behaviour tests, run from the original test file with only the
import lines changed (tests/compat/upstream.py lists what runs and what is left out, and why)."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import pytest

from tests.compat.upstream import SUITES, Suite, run_suite

log = logging.getLogger("sparkrunner")


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("suite", SUITES, ids=[s.name for s in SUITES])
def test_original_public_tests_pass_against_the_drop_in(suite: Suite, tmp_path: Path) -> None:
    if "SPARKRUNNER_UPSTREAM_TESTS" not in os.environ:
        pytest.skip(
            "opt-in (8-11 min): SPARKRUNNER_UPSTREAM_TESTS=~/.cache/sparkrunner/upstream-tests pytest ..."
        )
    if not suite.path().exists():
        pytest.skip(f"the original test file is not at {suite.path()} (scripts/fetch_upstream_tests.sh)")
    missing = [m for m in suite.requires if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{suite.name} needs {', '.join(missing)}")
    outcome = run_suite(suite, tmp_path)
    log.info(
        "%s: %d ran, %d passed, %d failed, %d skipped; %d left out",
        suite.name,
        outcome.ran,
        outcome.passed,
        outcome.failed,
        outcome.skipped,
        len(suite.left_out),
    )
    assert outcome.ran > 0 and outcome.failed == 0 and outcome.skipped == 0, outcome.output[-6000:]
