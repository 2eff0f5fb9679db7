"""The materialize cache's size limit, with a real `local[2]` SparkSession and real files: least recently used
entries go first, the limit holds (sizes summed here from the folder), an entry a live process holds is kept
(this process through its handle, or another process through its lease), and cache_info/clear_cache."""

from __future__ import annotations

import gc
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkrunner.data import cache_info, clear_cache, materialize
from sparkrunner.errors import InvalidArgumentError, SparkRunnerWarning
from tests.helpers import start_driver

pytestmark = pytest.mark.spark


def frame(spark: Any, rows: int) -> Any:
    return spark.range(rows).selectExpr("id", "id * 2 AS twice")


def sizes_on_disk(cache: Path) -> dict[str, int]:
    """Each entry folder's bytes, every file under it counted."""
    return {
        entry.name: sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
        for entry in cache.iterdir()
        if entry.is_dir()
    }


def written(spark: Any, cache: Path, rows: int, **options: Any) -> str:
    """Materialize and drop the handle at once (its lease goes with it); the entry's folder name."""
    return Path(materialize(frame(spark, rows), cache, progress=False, **options).uri).name


def test_least_recently_used_entries_go_first_and_the_limit_holds(spark_local: Any, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    a, b, c, d = (written(spark_local, cache, rows) for rows in (100, 200, 300, 400))
    written(spark_local, cache, 200)  # b used again: the order of last use is now a, c, d, b
    sizes = sizes_on_disk(cache)
    limit = sizes[b] + sizes[c] + 1  # c's reuse below must push out a, then d; b and c fit
    assert written(spark_local, cache, 300, cache_max_bytes=limit) == c
    after = sizes_on_disk(cache)
    assert set(after) == {b, c} and sum(after.values()) <= limit
    assert sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) <= limit  # nothing else left behind
    assert a != d


def test_an_entry_in_use_is_kept_over_the_limit(spark_local: Any, tmp_path: Path, monkeypatch: Any) -> None:
    cache = tmp_path / "cache"
    held = materialize(frame(spark_local, 100), cache, progress=False)  # the oldest, but its handle lives
    others = {written(spark_local, cache, rows) for rows in (200, 300)}
    monkeypatch.setenv("SPARKRUNNER_CACHE_MAX_BYTES", "1")
    with pytest.warns(SparkRunnerWarning, match="in use"):
        newest = written(spark_local, cache, 400)
    assert set(sizes_on_disk(cache)) == {Path(held.uri).name, newest} and newest not in others
    del held
    gc.collect()
    with pytest.warns(SparkRunnerWarning):
        written(spark_local, cache, 500)  # now only the newest call's own entry is left
    assert len(sizes_on_disk(cache)) == 1


def test_a_lease_of_a_live_process_is_honoured_and_a_dead_ones_is_not(
    spark_local: Any, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    key = written(spark_local, cache, 100)
    with start_driver("cache_lease_holder", str(cache), key, stdin=subprocess.PIPE) as other:
        assert other.stdout is not None and other.stdout.readline() == "leased\n"
        assert clear_cache(cache) == [] and [e.in_use for e in cache_info(cache)] == [True]
        other.communicate("")  # it exits, leaving its lease file behind
    assert [entry.key for entry in clear_cache(cache)] == [key] and sizes_on_disk(cache) == {}


def test_cache_info_lists_entries_by_last_use_and_clear_cache_keeps_those_in_use(
    spark_local: Any, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    first = written(spark_local, cache, 100)
    held = materialize(frame(spark_local, 200), cache, progress=False)
    assert held.path == held.uri
    info = cache_info(cache)
    sizes = sizes_on_disk(cache)
    assert [e.key for e in info] == [first, Path(held.uri).name]
    assert [e.num_bytes for e in info] == [sizes[first], sizes[Path(held.uri).name]]
    assert [e.in_use for e in info] == [False, True] and all(e.complete for e in info)
    assert info[0].last_used <= info[1].last_used
    assert [e.key for e in clear_cache(cache)] == [first]
    assert set(sizes_on_disk(cache)) == {Path(held.uri).name} and held.num_rows == 200


def test_a_limit_that_is_not_a_size_fails_before_writing(
    spark_local: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    with pytest.raises(InvalidArgumentError, match="cache_max_bytes"):
        materialize(frame(spark_local, 10), tmp_path / "cache", cache_max_bytes=0)
    monkeypatch.setenv("SPARKRUNNER_CACHE_MAX_BYTES", "ten gigs")
    with pytest.raises(InvalidArgumentError, match="SPARKRUNNER_CACHE_MAX_BYTES"):
        materialize(frame(spark_local, 10), tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
