"""A torch extension build lock its builder left when it was killed (what a DeepSpeed rank stopped mid-compile
leaves) is removed; one a live builder holds, or one made a moment ago, is not. The builders are real processes
taking the lock as torch's `FileBaton` does; torch's own baton is the oracle that the next build can go on. No
ranks: the rank's hook (`remove_stale_build_locks_on_import`) is `after_import("deepspeed", ...)`, a mechanism
tested with the other frameworks' hooks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from torch.utils.file_baton import FileBaton

from sparkrunner.frameworks.deepspeed_env import remove_stale_build_locks

_BUILDER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_EXCL)  # FileBaton.try_acquire, without importing torch
print("LOCKED", flush=True)
time.sleep(600)
"""


def builder(lock: Path) -> subprocess.Popen[str]:
    """A process that takes torch's build lock `lock` and holds it (building, as far as anyone can tell)."""
    lock.parent.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", _BUILDER, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "LOCKED"
    return proc


def test_a_killed_builders_lock_goes_and_a_live_or_fresh_ones_stays(tmp_path: Path) -> None:
    killed, live = tmp_path / "py311_cpu" / "shm_comm" / "lock", tmp_path / "py311_cpu" / "other_op" / "lock"
    dead = builder(killed)
    dead.kill()
    dead.wait(timeout=30)
    holder = builder(live)
    try:
        fresh = tmp_path / "fresh_op" / "lock"
        fresh.parent.mkdir()
        fresh.touch()
        for lock in (killed, live):
            os.utime(lock, (0, 0))  # older than any age bound
        assert not FileBaton(str(killed)).try_acquire()  # the next build would wait on it
        assert remove_stale_build_locks(tmp_path, min_age_s=60) == [killed]
        baton = FileBaton(str(killed))
        assert baton.try_acquire()
        baton.release()
        assert live.exists() and fresh.exists()
    finally:
        holder.kill()
        holder.wait(timeout=30)
