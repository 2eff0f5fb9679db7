"""Test helpers that inspect the real process table."""

from __future__ import annotations

import os
import time

from sparkrunner.processes import RUN_ID_ENV


def _rank_processes() -> dict[int, str]:
    found: dict[int, str] = {}
    needle = f"{RUN_ID_ENV}=".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != b"Z":
            found[int(entry)] = cmd
    return found


def leftover_rank_processes(grace_s: float = 0.0) -> dict[int, str]:
    """Live processes that carry a sparkrunner run id, after waiting up to `grace_s` for them to go."""
    deadline = time.monotonic() + grace_s
    found = _rank_processes()
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = _rank_processes()
    return found
