"""URIs to filesystems: every scheme the issue lists, checked on what each resolves to (no cloud needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from sparkrunner.common import storage
from sparkrunner.data import NumpyLoader, ParquetData, materialize
from sparkrunner.errors import DataNotSharedError, InvalidArgumentError
from tests.data.readers import write_dataset
from tests.data.s3_server import S3Server


def test_local_paths_and_file_uris_are_the_same_place(tmp_path: Path) -> None:
    for given in (str(tmp_path), f"file://{tmp_path}", f"file:{tmp_path}", tmp_path):
        location = storage.resolve(given)
        assert location.path == str(tmp_path) and location.is_local, given
    with pytest.raises(InvalidArgumentError, match="takes none"):
        storage.resolve(tmp_path, {"endpoint_override": "x"})


@pytest.mark.parametrize("scheme", ["s3", "s3a", "s3n"])
def test_s3_uris_honour_the_environment_endpoint(scheme: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    location = storage.resolve(f"{scheme}://bucket/some/prefix/")
    assert isinstance(location.filesystem, pafs.S3FileSystem) and location.path == "bucket/some/prefix"
    assert location.child("key").uri == f"{scheme}://bucket/some/prefix/key"
    assert not location.is_local


def test_other_schemes_map_to_their_filesystems() -> None:
    gcs = storage.resolve("gs://bucket/data", {"anonymous": True})
    assert isinstance(gcs.filesystem, pafs.GcsFileSystem) and gcs.path == "bucket/data"
    azure = storage.resolve("abfss://container@account.dfs.core.windows.net/dir/data")
    assert azure.path == "container/dir/data"
    memory = storage.resolve("memory://scratch/data")  # a scheme only fsspec has
    assert isinstance(memory.filesystem, pafs.PyFileSystem)
    with pytest.raises(InvalidArgumentError, match=r"pyarrow\.fs\.S3FileSystem"):
        storage.resolve("s3://bucket/x", {"no_such_option": 1})
    with pytest.raises(InvalidArgumentError, match="nothing here can open"):
        storage.resolve("nosuchscheme://x/y")


def test_dbfs_maps_to_the_databricks_mounts_or_says_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "DBFS_MOUNT", "/nonexistent-dbfs")
    with pytest.raises(InvalidArgumentError, match="/nonexistent-dbfs mount"):
        storage.resolve("dbfs:/ml/data")
    monkeypatch.setattr(storage, "DBFS_MOUNT", "/tmp")  # a machine where the mount exists
    assert storage.resolve("dbfs:/ml/data").path == "/tmp/ml/data"
    monkeypatch.setattr(storage, "VOLUMES_ROOT", "/tmp")
    assert (
        storage.resolve("dbfs:/tmp/main/vol/data").path == "/tmp/main/vol/data"
    )  # dbfs:/Volumes/... -> /Volumes/...


def test_a_dataset_on_the_s3_server_reads_like_a_local_one(s3: S3Server, tmp_path: Path) -> None:
    local = materialize(write_dataset(tmp_path / "ds", [30, 20], row_group_rows=10))
    uri = s3.new_prefix()
    s3.upload(tmp_path / "ds", uri)
    remote = materialize(uri, storage_options=s3.storage_options)
    assert remote.row_groups == local.row_groups and remote.columns == local.columns
    assert remote.num_bytes == local.num_bytes and "storage_options" not in repr(remote)
    assert [f.num_rows for f in remote.files] == [30, 20]
    with pytest.raises(InvalidArgumentError, match="no Parquet dataset"):
        materialize(uri + "-missing", storage_options=s3.storage_options)
    remote.delete()
    assert s3.filesystem().get_file_info(uri.removeprefix("s3://")).type == pafs.FileType.NotFound
    assert np.array_equal([g.num_rows for g in local.row_groups], [10, 10, 10, 10, 10])


def test_a_rank_that_cannot_see_the_files_is_refused_with_the_uri_to_use(tmp_path: Path) -> None:
    """What a rank on another host meets when the dataset is on the driver's own disk: files not there."""
    data = materialize(write_dataset(tmp_path / "ds", [30, 20], row_group_rows=10))
    assert len(NumpyLoader(data, 5, rank=0, world_size=2)) == 5
    (tmp_path / "ds" / "part-00001.parquet").unlink()
    with pytest.raises(DataNotSharedError, match=r"rank 1 on .* cannot read 1 of the 2 files") as caught:
        NumpyLoader(data, 5, rank=1, world_size=2)
    assert "s3://bucket/prefix" in str(caught.value)


def _shard(data: ParquetData, rank: int, shuffle: bool) -> tuple[np.ndarray, np.ndarray]:
    batches = list(NumpyLoader(data, 5, rank=rank, world_size=2, shuffle=shuffle, seed=3))
    return np.concatenate([b["id"] for b in batches]), np.concatenate([b["x"] for b in batches])


@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_read_from_the_s3_server_match_the_files_row_for_row(
    s3: S3Server, tmp_path: Path, shuffle: bool
) -> None:
    """Unshuffled, rank 0 fetches both its files whole and rank 1 reads 5 of file 1's 20 rows by row group
    and file 2 whole; shuffled, row groups are read one by one. Either way: the files' own rows, in order."""
    path = write_dataset(tmp_path / "ds", [30, 20, 40], row_group_rows=10)
    uri = s3.new_prefix()
    s3.upload(path, uri)
    remote, local = materialize(uri, storage_options=s3.storage_options), materialize(path)
    source = pq.read_table(sorted(path.glob("*.parquet")))
    by_id = dict(zip(source.column("id").to_pylist(), source.column("x").to_pylist(), strict=True))
    shards = [_shard(remote, rank, shuffle) for rank in (0, 1)]
    for rank, (ids, x) in enumerate(shards):
        np.testing.assert_array_equal(ids, _shard(local, rank, shuffle)[0])
        np.testing.assert_array_equal(x, np.array([by_id[i] for i in ids.tolist()]))
    everything = np.concatenate([ids for ids, _ in shards])
    if not shuffle:  # contiguous halves in file order
        np.testing.assert_array_equal(everything, source.column("id").to_numpy())
    assert sorted(everything.tolist()) == sorted(source.column("id").to_pylist())
