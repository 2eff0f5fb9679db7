"""Sharded checkpoints (torch.distributed.checkpoint, FSDP2): one folder per step in the run's checkpoint folder.

Every rank writes its own shard into the same folder, so there is no single file to rename into place. DCP
writes the folder's `.metadata` last, once every rank's shard is written: a folder with it is complete, one
without it (a save cut short by a lost executor) is skipped on resume.
"""

from __future__ import annotations

import contextlib
import os
import shutil

from sparkrunner.common.checkpoint_dir import CheckpointFile, list_sharded
from sparkrunner.ranks.checkpoints import checkpoint_dir


def sharded_checkpoint(step: int, keep: int = 2) -> str:
    """The folder to give `torch.distributed.checkpoint.save(..., checkpoint_id=...)` for `step`, on every rank.

    Rank 0 removes the older complete folders beyond the newest `keep - 1`, so that `keep` remain once this
    save completes."""
    from sparkrunner.ranks import anatomy
    from sparkrunner.ranks.api import rank_context

    anatomy.checkpoint_step()  # every rank saves its shard in this step
    folder = checkpoint_dir()
    if rank_context().rank == 0:
        for old in [c for c in list_sharded(folder) if c.step != step][max(keep - 1, 0) :]:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(old.path)
    return os.path.join(folder, f"sharded-{int(step):012d}")


def latest_sharded_checkpoint() -> CheckpointFile | None:
    """The newest complete sharded checkpoint of this run (its folder and step), or None when there is none."""
    return next(iter(list_sharded(checkpoint_dir())), None)
