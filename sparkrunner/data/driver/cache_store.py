"""The materialize cache folder: its entries, their sizes and last use, and eviction to a size limit.

Each entry is a folder named by its cache key. `materialize` stamps ``_sparkrunner_last_use`` in it on every
write or reuse; when the folder holds more than the limit (``cache_max_bytes`` or $SPARKRUNNER_CACHE_MAX_BYTES),
the least recently used entries are deleted first, never one that is leased (`cache_leases`: in use by a live
process). An entry may still be left over the limit when everything left is in use; a warning says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import time
import warnings
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkrunner.common import storage
from sparkrunner.common.checks import check_number
from sparkrunner.common.environment import Env
from sparkrunner.data.dataset import MANIFEST, human_bytes
from sparkrunner.data.driver import cache_leases
from sparkrunner.errors import InvalidArgumentError, SparkRunnerWarning

CACHE_ENV = Env.DATA_CACHE
MAX_BYTES_ENV = Env.CACHE_MAX_BYTES
LAST_USE = "_sparkrunner_last_use"
_KEY = re.compile(r"^[0-9a-f]{24}$")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CacheEntry:
    """One cache entry: its key (folder name), URI, size on disk, last use, and whether a live process holds it."""

    key: str
    uri: str
    num_bytes: int
    last_used: float
    """Seconds since the epoch of the last materialize that wrote or reused it."""
    in_use: bool
    complete: bool
    """False for a write in progress, or one that failed (no manifest)."""


def default_cache_dir() -> str:
    """$SPARKRUNNER_DATA_CACHE, else ~/.cache/sparkrunner-datasets."""
    return os.environ.get(CACHE_ENV) or os.path.join(Path.home(), ".cache", "sparkrunner-datasets")


def max_bytes(given: int | None) -> int | None:
    """The size limit: `given`, else $SPARKRUNNER_CACHE_MAX_BYTES (bytes, or with a K/M/G/T suffix), else none."""
    if given is not None:
        return int(check_number("cache_max_bytes", given, 1, note=" (bytes) or None"))
    text = os.environ.get(MAX_BYTES_ENV, "")
    if not text.strip():
        return None
    match = _SIZE.match(text)
    if not match or int(match.group(1)) < 1:
        raise InvalidArgumentError(
            f"${MAX_BYTES_ENV}={text!r} is not a size: give bytes (10000000000) or a number with K, M, G or T "
            f"(10G), or unset it for no limit"
        )
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def stamp(cache: storage.Location, key: str) -> None:
    """Record now as the entry's last use."""
    with cache.filesystem.open_output_stream(posixpath.join(cache.path, key, LAST_USE)) as stream:
        stream.write(str(time.time_ns()).encode())


def entries(cache: storage.Location) -> list[CacheEntry]:
    """Every entry of the cache, least recently used first; dead leases found on the way are removed."""
    import pyarrow.fs as pafs

    if cache.filesystem.get_file_info(cache.path).type != pafs.FileType.Directory:
        return []
    files: dict[str, list[Any]] = defaultdict(list)
    for info in cache.filesystem.get_file_info(pafs.FileSelector(cache.path, recursive=True)):
        key = posixpath.relpath(info.path, cache.path).split("/", 1)[0]
        if _KEY.match(key) and info.type == pafs.FileType.File:
            files[key].append(info)
    found = [_entry(cache, key, infos) for key, infos in files.items()]
    return sorted(found, key=lambda entry: (entry.last_used, entry.key))


def evict(cache: storage.Location, limit: int) -> list[CacheEntry]:
    """Delete least recently used entries not in use until the cache holds at most `limit` bytes."""
    removed = []
    with cache_leases.cache_lock(cache):
        present = entries(cache)
        total = sum(entry.num_bytes for entry in present)
        for entry in present:
            if total <= limit:
                break
            if not entry.in_use:
                _delete(cache, entry)
                removed.append(entry)
                total -= entry.num_bytes
    if removed:
        logger.info(
            "materialize cache %s: removed %d least recently used entries (%s) to stay under %s",
            cache.uri, len(removed), human_bytes(sum(e.num_bytes for e in removed)), human_bytes(limit),
        )  # fmt: skip
    if total > limit:
        warnings.warn(
            f"the materialize cache {cache.uri} holds {human_bytes(total)}, over its limit of "
            f"{human_bytes(limit)}, because what is left is in use: it is trimmed again at the next materialize",
            SparkRunnerWarning,
            stacklevel=3,
        )
    return removed


def cache_info(
    cache_dir: str | os.PathLike[str] | None = None, *, storage_options: Mapping[str, Any] | None = None
) -> list[CacheEntry]:
    """The entries of the materialize cache (default: $SPARKRUNNER_DATA_CACHE), least recently used first."""
    return entries(storage.resolve(cache_dir or default_cache_dir(), storage_options))


def clear_cache(
    cache_dir: str | os.PathLike[str] | None = None, *, storage_options: Mapping[str, Any] | None = None
) -> list[CacheEntry]:
    """Delete every entry of the materialize cache that no live process holds; returns those deleted."""
    cache = storage.resolve(cache_dir or default_cache_dir(), storage_options)
    with cache_leases.cache_lock(cache):
        removed = [entry for entry in entries(cache) if not entry.in_use]
        for entry in removed:
            _delete(cache, entry)
    return removed


def _entry(cache: storage.Location, key: str, infos: list[Any]) -> CacheEntry:
    names = {posixpath.relpath(info.path, posixpath.join(cache.path, key)): info for info in infos}
    leases = [
        cache_leases.parse(info.path) for name, info in names.items() if name.startswith(cache_leases.LEASES)
    ]
    live = [lease for lease in leases if lease is not None and lease.alive()]
    for lease in leases:
        if lease is not None and lease not in live:
            cache_leases.release(cache.filesystem, lease.path)
    return CacheEntry(
        key=key,
        uri=cache.child(key).uri,
        num_bytes=sum(info.size or 0 for info in infos),
        last_used=_last_use(cache, key, names),
        in_use=bool(live),
        complete=MANIFEST in names,
    )


def _last_use(cache: storage.Location, key: str, names: dict[str, Any]) -> float:
    """The stamp's time, else the newest file's modification time (an entry written before stamps existed)."""
    if LAST_USE in names:
        try:
            with cache.filesystem.open_input_stream(posixpath.join(cache.path, key, LAST_USE)) as stream:
                return int(stream.read().decode()) / 1e9
        except (OSError, ValueError):
            pass
    return max((info.mtime_ns or 0) / 1e9 for info in names.values())


def _delete(cache: storage.Location, entry: CacheEntry) -> None:
    with contextlib.suppress(FileNotFoundError):  # another process removed it first
        cache.filesystem.delete_dir(posixpath.join(cache.path, entry.key))
