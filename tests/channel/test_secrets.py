"""The run secret and the task agents' key are in no command line and no environment of a rank or its children.

The test reads /proc/PID/environ and /proc/PID/cmdline itself, for every rank and for a subprocess each rank's
`main` starts, under both launchers, on the driver (np=-2) and on Spark (local-cluster, np=2). Both secrets are
32 random bytes; anything that looks like one (64 hex digits) or a sparkrunner variable named after one fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from tests.helpers import driver
from tests.matrix import LAUNCHERS
from tests.waiting import poll_until, wait_until

SECRET_LOOKING = re.compile(rb"(?<![0-9a-fA-F])[0-9a-fA-F]{64}(?![0-9a-fA-F])")
SECRET_NAMES = re.compile(rb"SPARKRUNNER_[A-Z_]*(SECRET|KEY)=")
# Spark gives every Python worker its worker factory's secret; the user's code runs in such a worker anyway
SPARKS_OWN = re.compile(rb"PYTHON_WORKER_FACTORY_SECRET=[0-9a-fA-F]+")


def report_pids_and_wait(folder: str) -> int:
    """Each rank: start a child, say both pids, and stay until the test has looked at them."""
    import os
    import subprocess

    child = subprocess.Popen(["sleep", "120"])
    rank = int(os.environ["RANK"])
    tmp = f"{folder}/rank{rank}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    os.rename(tmp, f"{folder}/rank{rank}.pids")
    poll_until(lambda: os.path.exists(f"{folder}/release"), 120)
    child.kill()
    child.wait()
    return rank


def _proc(pid: int, what: str) -> bytes:
    with open(f"/proc/{pid}/{what}", "rb") as f:
        return f.read()


def _secret_folder(environ: bytes) -> str | None:
    for entry in environ.split(b"\0"):
        if entry.startswith(b"SPARKRUNNER_SECRET_DIR="):
            return entry.split(b"=", 1)[1].decode()
    return None


def _inspect_ranks(folder: Path, num_ranks: int) -> dict[int, dict[str, bytes]]:
    """Wait for every rank's pids, then read what /proc shows of each rank and each rank's child."""
    wait_until(
        lambda: len(list(folder.glob("*.pids"))) >= num_ranks, 180, "the ranks never reported their pids"
    )
    seen = {}
    for path in folder.glob("*.pids"):
        for pid in map(int, path.read_text().split()):
            seen[pid] = {"environ": _proc(pid, "environ"), "cmdline": _proc(pid, "cmdline")}
    return seen


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("np", [-2, 2], ids=["local", "spark"])
def test_no_secret_in_the_environment_or_command_line_of_ranks_and_their_children(
    launcher: str, np: int, tmp_path: Path, request: Any
) -> None:
    spark = request.getfixturevalue("spark_cluster") if np > 0 else None
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            runner = Runner(
                np=np, spark=spark, launcher=launcher, tracking=False, progress=False, timeout=240
            )
            outcome["value"] = runner.run(report_pids_and_wait, str(tmp_path))
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    try:
        seen = _inspect_ranks(tmp_path, abs(np))
    finally:
        (tmp_path / "release").touch()
        thread.join(300)
    assert "error" not in outcome, outcome.get("error")
    assert outcome["value"] == 0
    assert len(seen) == 2 * abs(np)  # every rank and every rank's child
    for pid, views in seen.items():
        for what, text in views.items():
            assert not SECRET_NAMES.search(text), f"pid {pid}'s {what} names a secret: {text!r}"
            assert not SECRET_LOOKING.search(SPARKS_OWN.sub(b"", text)), (
                f"pid {pid}'s {what} holds a secret-like value: {text!r}"
            )
        folder = _secret_folder(views["environ"])
        if folder is not None and os.path.isdir(folder):
            assert os.listdir(folder) == [], f"secret files left to read in {folder}"


def _spawner_with_a_secret_folder() -> tuple[subprocess.Popen[str], str]:
    """A process that made a secret folder (with a secret nobody took) and is still running."""
    proc = subprocess.Popen(
        [sys.executable, str(driver("secret_spawner"))], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    folder = proc.stdout.readline().strip()
    assert os.path.isdir(folder), f"the spawner made no secret folder: {folder!r}"
    return proc, folder


@pytest.mark.slow
def test_a_killed_spawners_secret_folder_is_removed_by_the_next_run_on_its_host() -> None:
    """A spawner SIGKILLed before it cleaned up (as Spark kills a cancelled task's Python worker) leaves its
    folder; the next run on the host (np=-2, launcher direct) removes it and keeps a live spawner's."""
    killed, killed_folder = _spawner_with_a_secret_folder()
    alive, alive_folder = _spawner_with_a_secret_folder()
    try:
        killed.kill()
        killed.wait()
        assert os.listdir(killed_folder), "the killed spawner's untaken secret must still be there"
        assert Runner(np=-2, launcher="direct", tracking=False, progress=False).run(os.getpid) > 0
        assert not os.path.exists(killed_folder), "a dead spawner's secret folder was left on the host"
        assert os.listdir(alive_folder), "a running spawner's secret folder must not be touched"
    finally:
        alive.kill()
        alive.wait()
        shutil.rmtree(alive_folder, ignore_errors=True)
