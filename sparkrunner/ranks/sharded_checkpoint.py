"""Sharded checkpoints (torch.distributed.checkpoint, FSDP2): one folder per step in the run's checkpoint folder.

Every rank writes its own shard into the same folder, so there is no single file to rename into place. DCP
writes the folder's `.metadata` last, once every rank's shard is written: a folder with it is complete, one
without it (a save cut short by a lost executor) is skipped on resume. On an object store the folder is a URI,
which DCP writes through fsspec (``s3://`` needs the ``s3fs`` package).
"""

from __future__ import annotations

from sparkrunner.common.checkpoint_dir import CheckpointFile, list_sharded
from sparkrunner.common.checkpoint_folder import folder_at
from sparkrunner.ranks.checkpoints import checkpoint_dir


def sharded_checkpoint(step: int, keep: int = 2) -> str:
    """The folder (a path or a URI) to give `torch.distributed.checkpoint.save(..., checkpoint_id=...)`, or
    `async_save` to save in the background, for `step`, on every rank.

    Rank 0 removes the older complete folders beyond the newest `keep - 1`, so that `keep` remain once this
    save completes."""
    from sparkrunner.ranks import anatomy
    from sparkrunner.ranks.api import rank_context

    anatomy.checkpoint_step()  # every rank saves its shard in this step
    folder = folder_at(checkpoint_dir())
    name = f"sharded-{int(step):012d}"
    if rank_context().rank == 0:
        for old in [c for c in list_sharded(folder) if c.name != name][max(keep - 1, 0) :]:
            folder.remove(old.name)
    return folder.child(name).uri


def latest_sharded_checkpoint() -> CheckpointFile | None:
    """The newest complete sharded checkpoint of this run (its folder and step), or None when there is none."""
    return next(iter(list_sharded(folder_at(checkpoint_dir()))), None)
