"""Leases on cache entries: a cache entry is in use while a live process holds a handle to it.

A lease is an empty file ``<entry>/_sparkrunner_leases/<host>~<pid>~<start>~<token>.lease``. `materialize`
takes one before it reads or writes an entry, and the returned `ParquetData` gives it back when the handle
is garbage-collected or the process exits. The process that calls `Runner.run(..., data=...)` holds the
handle for the whole run, so an entry that any run reads is leased. A lease names its process by host, pid
and start time: on its own host a lease whose process is gone (or whose pid now belongs to a later process)
is dead and is removed; a lease from another host cannot be checked from here and is honoured until a cache
operation on that host finds it dead.

On a local (or mounted) cache folder, taking a lease and evicting hold an exclusive `flock` on
``<cache>/.sparkrunner-cache.lock``, so an entry is never deleted between a reader finding it and leasing it.
Object stores have no such lock: there the check and the deletion are a few requests apart.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import posixpath
import socket
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sparkrunner.common import storage
from sparkrunner.system.processes import proc_stat

LEASES = "_sparkrunner_leases"
_SUFFIX = ".lease"
_LOCK = ".sparkrunner-cache.lock"


@dataclass(frozen=True)
class Lease:
    """One lease file, and the process it names."""

    path: str
    host: str
    pid: int
    start: str

    def alive(self) -> bool:
        """False only when the process is provably gone: on this host, with no such pid or another start time."""
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process: alive
            pass
        now = _start_time(self.pid)
        return not (self.start and now) or now == self.start


def take(cache: storage.Location, key: str) -> Lease:
    """Lease the entry `key` of `cache` for this process (creating its folder), under the cache lock."""
    start = _start_time(os.getpid())
    name = f"{socket.gethostname()}~{os.getpid()}~{start}~{uuid.uuid4().hex[:8]}{_SUFFIX}"
    folder = posixpath.join(cache.path, key, LEASES)
    with cache_lock(cache):
        cache.filesystem.create_dir(folder, recursive=True)
        path = posixpath.join(folder, name)
        cache.filesystem.open_output_stream(path).close()
    return Lease(path, socket.gethostname(), os.getpid(), start)


def hold_while_alive(handle: Any, cache: storage.Location, lease: Lease) -> None:
    """Give `lease` back when `handle` is garbage-collected (or at exit)."""
    weakref.finalize(handle, release, cache.filesystem, lease.path)


def release(filesystem: Any, path: str) -> None:
    """Remove a lease file; one already gone (its entry cleared) is fine."""
    with contextlib.suppress(FileNotFoundError, OSError):
        filesystem.delete_file(path)


def parse(path: str) -> Lease | None:
    """The lease that a file under an entry's lease folder names, or None for any other file."""
    name = posixpath.basename(path)
    parts = name[: -len(_SUFFIX)].split("~") if name.endswith(_SUFFIX) else []
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    return Lease(path, parts[0], int(parts[1]), parts[2])


@contextlib.contextmanager
def cache_lock(cache: storage.Location) -> Iterator[None]:
    """An exclusive lock on the cache folder when it is on this machine's filesystem (none on object stores)."""
    if not cache.is_local:
        yield
        return
    os.makedirs(cache.path, exist_ok=True)
    with open(os.path.join(cache.path, _LOCK), "a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), so a reused pid is told apart; else ""."""
    stat = proc_stat(pid)
    return "" if stat is None else str(stat.start_ticks)
