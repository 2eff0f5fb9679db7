"""Shared or refused: a dataset on a machine's own disk must not reach ranks on other hosts as an empty or
partial dataset. Spark tasks (on the cluster's hosts) and each rank compare what they see with the metadata
the driver read; a difference fails with a message that says which location to use instead."""

from __future__ import annotations

import socket

from sparkrunner.common.environment import Env
from sparkrunner.data.dataset import ParquetData, human_bytes, path_in
from sparkrunner.errors import DataNotSharedError

ADVICE = (
    "Every host of the run must read the same files: materialize into storage they all share, e.g. "
    "materialize(df, cache_dir='s3://bucket/prefix') (or gs://, abfss://, hdfs://, dbfs:/, /Volumes/...), or a "
    f"mount every host has (NFS, /dbfs); set it for all runs with {Env.DATA_CACHE}."
)


def check_writers_shared(data_uri: str, written_on: list[str], missing: list[str]) -> None:
    """After a write: files the tasks wrote that the driver cannot see mean a per-host disk."""
    if missing:
        raise DataNotSharedError(
            f"{data_uri} is not shared: Spark tasks on {', '.join(written_on)} wrote {len(missing)} files there "
            f"that this driver ({socket.gethostname()}) cannot see (e.g. {missing[0]}). {ADVICE}"
        )


def check_rank_sees(data: ParquetData, rank: int) -> None:
    """On a rank, before reading: the files of a local-path dataset are there, at the sizes the driver saw."""
    import pyarrow.fs as pafs

    root = data.location()
    if not root.is_local:
        return
    infos = root.filesystem.get_file_info([path_in(root, file.name) for file in data.files])
    wrong = [
        file.name
        for file, info in zip(data.files, infos, strict=True)
        if info.type != pafs.FileType.File or info.size != file.size
    ]
    if wrong:
        raise DataNotSharedError(
            f"rank {rank} on {socket.gethostname()} cannot read {len(wrong)} of the {len(data.files)} files "
            f"({human_bytes(data.num_bytes)}) of {data.uri} that the driver read (e.g. {wrong[0]!r}). {ADVICE}"
        )
