"""The one-driver soak's samples and verdicts (bench/footprint.py): a process carrying this driver's session tag
counts as a Python worker by its command line and with its RSS, one carrying another tag does not; new files in
the temp dir and new /dev/shm entries count; a quantity rising with the operation count reads "GROWS" with its
least-squares slope, one within its bound "bounded". Real processes and files, no Spark."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench import footprint
from tests.helpers import TEST_SESSION_ENV
from tests.scenarios.faults.leftovers import SHM, shm_entries, use_private_temp_dir


@pytest.fixture
def tagged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """This process's own session tag and temp dir, put back afterwards."""
    monkeypatch.setenv(TEST_SESSION_ENV, uuid.uuid4().hex)
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", ""))
    use_private_temp_dir(tmp_path / "temp")
    yield tmp_path / "temp"


def _sleeper(tag: str) -> subprocess.Popen[bytes]:
    """A process whose command line names Spark's Python daemon, carrying the session tag `tag`, once started."""
    env = {**os.environ, TEST_SESSION_ENV: tag}
    code = "import time; print('up', flush=True); time.sleep(60)"
    process = subprocess.Popen(
        [sys.executable, "-c", code, footprint.PYTHON_WORKER], env=env, stdout=subprocess.PIPE
    )
    assert process.stdout is not None and process.stdout.readline() == b"up\n"
    return process


def test_a_sample_counts_this_drivers_processes_files_and_shm_entries_only(tagged: Path) -> None:
    before = footprint.sample(shm_entries())
    ours, theirs = _sleeper(os.environ[TEST_SESSION_ENV]), _sleeper("another-driver")
    shm = Path(SHM, f"footprint-{uuid.uuid4().hex}")
    try:
        (tagged / "folder").mkdir()
        for name in ("a", "b"):
            (tagged / "folder" / name).write_text(name)
        shm_before = shm_entries()
        shm.write_bytes(b"x")
        now = footprint.sample(shm_before)
        rss_kb = int(next(line for line in Path(f"/proc/{ours.pid}/status").read_text().splitlines()
                          if line.startswith("VmRSS:")).split()[1])  # fmt: skip
    finally:
        shm.unlink()
        for process in (ours, theirs):
            process.kill()
            process.wait()
    assert now["py workers"] - before["py workers"] == 1
    assert now["py workers MB"] - before["py workers MB"] == pytest.approx(rss_kb / 1024, abs=2)
    assert (now["temp entries"], now["temp files"], now["/dev/shm"]) == (1, 2, 1)


def _rows(values: dict[str, list[float]]) -> list[tuple[int, dict[str, float]]]:
    flat = {name: 100.0 for name in footprint.BOUNDS}
    count = len(next(iter(values.values())))
    return [(10 * i, {**flat, **{n: v[i] for n, v in values.items()}}) for i in range(count)]


def test_a_quantity_that_rises_with_the_operations_grows_and_one_within_its_bound_is_bounded() -> None:
    rising = [10.0 + i for i in range(21)]  # one more every 10 operations
    steady = [10.0, 12.0, 11.0] + [13.0, 11.0, 12.0] * 6  # fds may rise by 8 over the warm-up's maximum
    rows = _rows({"threads": rising, "fds": steady})
    lines = {line.split()[0]: line.split() for line in footprint.verdicts(rows, warm_up=20)[1:]}
    assert lines["threads"][-1] == "GROWS" and lines["fds"][-1] == "bounded"
    after = [(n, s["threads"]) for n, s in rows if n >= 20]
    oracle = 100 * np.polyfit([n for n, _ in after], [v for _, v in after], 1)[0]
    assert float(lines["threads"][3]) == pytest.approx(oracle, abs=0.05)
    assert footprint.BOUNDS["fds"].allows(12, 20) and not footprint.BOUNDS["fds"].allows(12, 21)
