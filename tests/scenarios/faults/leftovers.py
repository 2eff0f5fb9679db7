"""What a run may leave on this machine, scanned by the tests themselves (not by the library's clean-up): rank
processes (/proc), `sparkrunner-*` folders in the temp dir, `/dev/shm` entries, and ports no longer bindable.
Shared by the fault matrix, the CI-sized soak and `bench/soak.py`."""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from dataclasses import dataclass, field

from tests.helpers import rank_processes
from tests.waiting import poll_until

SHM = "/dev/shm"
LEFTOVER_GRACE_S = 10.0
"""How long the run's leftovers get to go after `run()` returned (watchers poll, killed processes are reaped)."""


def _temp_entries() -> set[str]:
    temp = tempfile.gettempdir()
    return {os.path.join(temp, name) for name in os.listdir(temp) if name.startswith("sparkrunner-")}


def _shm_entries() -> set[str]:
    return set(os.listdir(SHM)) if os.path.isdir(SHM) else set()


def bindable(port: int) -> bool:
    """A server could listen on `port` again now (SO_REUSEADDR, as servers bind: TIME_WAIT does not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError):
            probe.bind(("0.0.0.0", port))
            return True
    return False


@dataclass
class Leftovers:
    """The machine before a run; `after(ports)` lists what the run left (empty when nothing), waiting up to
    `LEFTOVER_GRACE_S`. Entries other sessions on this machine make and remove meanwhile are waited out too."""

    temp: set[str] = field(default_factory=_temp_entries)
    shm: set[str] = field(default_factory=_shm_entries)

    def now(self, ports: set[int]) -> list[str]:
        found = [f"process {pid}: {cmd}" for pid, cmd in rank_processes().items()]
        found += [f"temp folder {path}" for path in sorted(_temp_entries() - self.temp)]
        found += [f"/dev/shm/{name}" for name in sorted(_shm_entries() - self.shm)]
        return found + [f"port {port} still bound" for port in sorted(ports) if not bindable(port)]

    def after(self, ports: set[int] = frozenset()) -> list[str]:  # type: ignore[assignment]
        poll_until(lambda: not self.now(set(ports)), LEFTOVER_GRACE_S)
        return self.now(set(ports))
