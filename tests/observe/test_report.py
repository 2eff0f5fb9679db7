"""The report folder of a driver that lives for days: each run's report is saved, and beyond `REPORTS_KEPT` the
oldest reports go while any other file stays. Real files; their ages are set here (the oracle)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkrunner.observe.charts import Timeline
from sparkrunner.observe.observers import RunRecord
from sparkrunner.observe.report import REPORTS_KEPT, save_report


def test_beyond_the_kept_count_the_oldest_reports_are_deleted_and_other_files_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKRUNNER_REPORT_DIR", str(tmp_path))
    old = [tmp_path / f"sparkrunner-old{age:03d}.html" for age in range(REPORTS_KEPT)]  # old000: the newest
    for age, report in enumerate(old):
        report.write_text("<html></html>")
        os.utime(report, ns=(0, 10**18 - age * 10**9))
    other = tmp_path / "notes.html"
    other.write_text("mine")
    os.utime(other, ns=(0, 1))
    paths = [save_report(RunRecord(f"run{i}", "train", -2, "direct"), Timeline([], {}), []) for i in range(2)]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(
        {p.name for p in old[: REPORTS_KEPT - 2]} | {"notes.html"} | {Path(p).name for p in paths}
    )
    assert "sparkrunner run report: train" in Path(paths[-1]).read_text()
