"""Each drop-in passes its original's public-behaviour tests, run from the original test file with only the
import lines changed (tests/compat/upstream.py lists what runs and what is left out, and why)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.compat.upstream import SUITES, Suite, run_suite, skip_reason

log = logging.getLogger("sparkrunner")


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize("suite", SUITES, ids=[s.name for s in SUITES])
def test_original_public_tests_pass_against_the_drop_in(suite: Suite, tmp_path: Path) -> None:
    reason = skip_reason(suite.name, suite.path(), suite.requires)
    if reason is not None:
        pytest.skip(reason)
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
