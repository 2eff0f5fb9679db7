"""Whether this environment's real Horovod build has MPI (`sparkrunner.frameworks.horovod_build`), asked in fresh
driver processes as a notebook kernel or a spark-submit job would: Horovod's own probe answers once, and later
processes read the kept answer instead of loading Horovod's extensions again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ASK = "from sparkrunner.frameworks.horovod_build import horovod_has_mpi; print('ANSWER', horovod_has_mpi())"
PROBE_FAILS = (
    "import horovod.common.util as util\n"
    "def probed(*args, **kwargs): raise AssertionError('Horovod was probed')\n"
    "util.mpi_built = probed\n"
)
"""Makes Horovod's own probe fail in that process: a process that still answers True did not probe."""


def answer(cache: Path, before: str = "") -> str:
    """What `horovod_has_mpi()` says in a new Python process whose cache folder is `cache`."""
    done = subprocess.run(
        [sys.executable, "-c", before + ASK], env={**os.environ, "XDG_CACHE_HOME": str(cache)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.split("ANSWER ")[-1].strip()


@pytest.mark.slow
def test_horovod_s_own_probe_answers_once_then_its_answer_is_kept(tmp_path: Path) -> None:
    """Placement: none (the driver process alone). The oracle is Horovod's `mpi_built()`, asked directly."""
    horovod = subprocess.run(
        [sys.executable, "-c", "from horovod.common.util import mpi_built; print(mpi_built())"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert horovod.stdout.strip() == "True", f"this environment's Horovod has no MPI: {horovod}"

    assert answer(tmp_path / "empty", PROBE_FAILS) == "False", "the stand-in for a failing probe was not used"
    assert answer(tmp_path / "cache") == "True"
    kept = list((tmp_path / "cache" / "sparkrunner").glob("horovod-has-mpi-*"))
    assert len(kept) == 1, f"no answer kept: {kept}"
    assert answer(tmp_path / "cache", PROBE_FAILS) == "True", "a later process probed Horovod again"
    assert not (tmp_path / "empty" / "sparkrunner").exists() or not any(
        (tmp_path / "empty" / "sparkrunner").iterdir()
    ), "a failed probe's no was kept"
