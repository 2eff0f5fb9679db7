"""Test helpers that inspect the real process table."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sparkrunner.processes import processes_of_run

ROOT = Path(__file__).resolve().parents[1]


def _rank_processes() -> dict[int, str]:
    found: dict[int, str] = {}
    for pid in processes_of_run(None):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it ended meanwhile
    return found


def leftover_rank_processes(grace_s: float = 0.0) -> dict[int, str]:
    """Live processes that carry a sparkrunner run id, after waiting up to `grace_s` for them to go."""
    deadline = time.monotonic() + grace_s
    found = _rank_processes()
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = _rank_processes()
    return found


def start_driver(script: str, tmp_path: Path) -> subprocess.Popen[str]:
    """Run `script` as a separate driver process (its own interpreter, and SparkSession if it makes one)."""
    path = tmp_path / "driver.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for_line(proc: subprocess.Popen[str], text: str, seconds: float = 120) -> list[str]:
    """Read the driver's output until a line contains `text`."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"never saw {text!r}; output was:\n{''.join(seen)}")


def run_driver(script: str, tmp_path: Path, seconds: float = 180) -> str:
    """Run a driver script to its end and return everything it printed."""
    out, _ = start_driver(script, tmp_path).communicate(timeout=seconds)
    return out
