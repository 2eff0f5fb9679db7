"""A checkpoint folder on the real S3-API server (moto) and on a local disk: what counts as complete, pruning,
and the locations nothing here can open. No rank runs here; `tests/recovery/test_checkpoints_on_stores.py` runs
ranks against the same server. The oracle for what is on the store is pyarrow's own S3 filesystem, opened by the
test with explicit options, not the folder under test."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkrunner.common.checkpoint_dir import list_checkpoints, list_sharded
from sparkrunner.common.checkpoint_folder import LocalFolder, StoreFolder, folder_at
from sparkrunner.errors import CheckpointDirError, MissingExtraError
from tests.data.s3_server import S3Server


@pytest.fixture
def on_s3(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix on the server, reached as a user reaches it: the endpoint and keys in the environment."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    return s3.new_prefix()


def objects(s3: S3Server, uri: str) -> list[str]:
    """What the bucket holds under `uri`, as names relative to it (read without the code under test)."""
    import pyarrow.fs as pafs

    root = uri.removeprefix("s3://")
    infos = s3.filesystem().get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return sorted(i.path[len(root) + 1 :] for i in infos if i.type == pafs.FileType.File)


def test_a_uri_is_never_taken_for_a_local_path(on_s3: str, tmp_path: Path) -> None:
    assert isinstance(folder_at(on_s3), StoreFolder)
    assert isinstance(folder_at("s3a://bucket/run"), StoreFolder)
    assert isinstance(folder_at(f"file://{tmp_path}"), LocalFolder)
    assert folder_at(f"file://{tmp_path}").uri == str(tmp_path)
    assert isinstance(folder_at("relative/folder"), LocalFolder)


def test_a_scheme_nothing_here_opens_is_refused_by_name() -> None:
    with pytest.raises(CheckpointDirError, match=r"checkpoint_dir='nosuchscheme://b/run' cannot be opened"):
        folder_at("nosuchscheme://b/run")


def test_a_file_is_complete_on_a_store_only_once_its_marker_is_written(s3: S3Server, on_s3: str) -> None:
    folder = folder_at(on_s3)
    folder.write("checkpoint-000000000001.pkl", lambda f: f.write(b"one"))
    # what a writer killed between its upload and its marker leaves: the object, no marker
    with s3.filesystem().open_output_stream(
        f"{on_s3.removeprefix('s3://')}/checkpoint-000000000002.pkl"
    ) as f:
        f.write(b"cut short")
    assert objects(s3, on_s3) == [
        "checkpoint-000000000001.pkl",
        "checkpoint-000000000001.pkl.complete",
        "checkpoint-000000000002.pkl",
    ]
    assert [c.step for c in list_checkpoints(folder)] == [1]
    assert folder.read("checkpoint-000000000001.pkl") == b"one"
    folder.remove("checkpoint-000000000001.pkl")
    assert objects(s3, on_s3) == ["checkpoint-000000000002.pkl"]


def test_a_sharded_save_counts_once_its_metadata_is_there(s3: S3Server, on_s3: str) -> None:
    """DCP writes `.metadata` last: a folder without it (a save cut short) is no checkpoint."""
    filesystem, root = s3.filesystem(), on_s3.removeprefix("s3://")
    for step, files in ((3, ("__0_0.distcp", ".metadata")), (4, ("__0_0.distcp",))):
        for name in files:
            with filesystem.open_output_stream(f"{root}/sharded-{step:012d}/{name}") as f:
                f.write(b"x")
    found = list_sharded(folder_at(on_s3))
    assert [(c.step, c.path) for c in found] == [(3, f"{on_s3}/sharded-000000000003")]


def test_a_local_folder_lists_what_was_renamed_into_place(tmp_path: Path) -> None:
    folder = folder_at(str(tmp_path))
    folder.write("checkpoint-000000000007.pt", lambda f: f.write(b"seven"))
    (tmp_path / ".checkpoint-writing-abc").write_bytes(b"half")  # a writer killed mid-write
    assert [(c.step, c.path) for c in list_checkpoints(folder)] == [
        (7, str(tmp_path / "checkpoint-000000000007.pt"))
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".checkpoint-writing-abc",
        "checkpoint-000000000007.pt",
    ]


def test_a_store_needs_pyarrow_and_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without pyarrow (the core install), an s3:// folder names the extra that brings it."""
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.fs", None)
    with pytest.raises(MissingExtraError, match=r"sparkrunner\[data\]"):
        folder_at("s3://bucket/run")


def test_removing_a_missing_file_is_no_error(on_s3: str, tmp_path: Path) -> None:
    for folder in (folder_at(on_s3), folder_at(str(tmp_path))):
        folder.remove("checkpoint-000000000001.pkl")
        assert folder.complete_names() == set()


def test_every_rank_folders_are_listed_as_folders(s3: S3Server, on_s3: str) -> None:
    folder = folder_at(on_s3)
    folder.child("rank1").write("checkpoint-000000000000.pkl", lambda f: f.write(b"r1"))
    assert "rank1" in folder.complete_names()
    assert [c.path for c in list_checkpoints(folder.child("rank1"))] == [
        f"{on_s3}/rank1/checkpoint-000000000000.pkl"
    ]
