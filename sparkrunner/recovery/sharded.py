"""Sharded checkpoints (torch.distributed.checkpoint, FSDP2): one folder per step in the run's checkpoint folder.

Every rank writes its own shard into the same folder, so there is no single file to rename into place. DCP
writes the folder's `.metadata` last, once every rank's shard is written: a folder with it is complete, one
without it (a save cut short by a lost executor) is skipped on resume.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil

from sparkrunner.recovery.checkpoints import CheckpointFile, checkpoint_dir, list_checkpoints

_NAME = re.compile(r"^sharded-(\d{12})$")
_COMPLETE = ".metadata"


def sharded_checkpoint(step: int, keep: int = 2) -> str:
    """The folder to give `torch.distributed.checkpoint.save(..., checkpoint_id=...)` for `step`, on every rank.

    Rank 0 removes the older complete folders beyond the newest `keep - 1`, so that `keep` remain once this
    save completes."""
    from sparkrunner.rank import rank_context

    folder = checkpoint_dir()
    if rank_context().rank == 0:
        for old in [c for c in list_sharded(folder) if c.step != step][max(keep - 1, 0) :]:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(old.path)
    return os.path.join(folder, f"sharded-{int(step):012d}")


def latest_sharded_checkpoint() -> CheckpointFile | None:
    """The newest complete sharded checkpoint of this run (its folder and step), or None when there is none."""
    return next(iter(list_sharded(checkpoint_dir())), None)


def list_sharded(folder: str) -> list[CheckpointFile]:
    """The complete sharded checkpoints in `folder`, newest (highest step) first."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = [
        CheckpointFile(os.path.join(folder, name), int(match.group(1)))
        for name in names
        if (match := _NAME.match(name)) and os.path.exists(os.path.join(folder, name, _COMPLETE))
    ]
    return sorted(found, key=lambda c: c.step, reverse=True)


def latest_step(folder: str) -> int | None:
    """The step of the newest complete checkpoint in `folder`, single-file or sharded (for the driver)."""
    steps = [c.step for c in [*list_checkpoints(folder)[:1], *list_sharded(folder)[:1]]]
    return max(steps, default=None)
