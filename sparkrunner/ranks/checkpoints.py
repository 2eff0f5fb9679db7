"""Checkpoints inside `main`: `save_checkpoint` writes atomically, `load_checkpoint` reads the latest complete one.

A checkpoint is one file, ``checkpoint-<step>.pt`` (written with ``torch.save`` when torch is imported in the
rank) or ``checkpoint-<step>.pkl`` (pickle). It is written under a temporary name, flushed to disk and renamed
into place, so a crash mid-write leaves the previous checkpoint as the latest, never a half-written one.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import warnings
from typing import Any

from sparkrunner.channel.environment import Env
from sparkrunner.common.checkpoint_dir import list_checkpoints
from sparkrunner.errors import CheckpointDirError, SparkRunnerWarning

_TEMP_PREFIX = ".checkpoint-writing-"


def checkpoint_dir() -> str:
    """The checkpoint folder of the run this rank belongs to, or a clear error when the run has none."""
    folder = os.environ.get(Env.CHECKPOINT_DIR)
    if not folder:
        raise CheckpointDirError(
            "this run has no checkpoint folder: pass Runner(..., checkpoint_dir='/a/folder/every/executor/"
            "and/the/driver/can/read') (np < 0 runs get one by default)"
        )
    return folder


def save_checkpoint(
    state: Any, step: int | None = None, keep: int = 2, every_rank: bool = False
) -> str | None:
    """Write `state` as this run's latest checkpoint, atomically; keep the newest `keep` checkpoints.

    Only rank 0 writes (other ranks return None at once), unless ``every_rank=True``: then each rank writes
    its own file in ``rank<N>/`` (for sharded states). `step` orders checkpoints (default: the latest + 1).
    Returns the path written.
    """
    from sparkrunner.ranks import anatomy
    from sparkrunner.ranks.api import rank_context

    if keep < 1:
        raise CheckpointDirError(f"keep={keep!r} would delete the checkpoint just written; use keep >= 1")
    rank = rank_context().rank
    if rank != 0 and not every_rank:
        return None
    anatomy.checkpoint_step()
    folder = _rank_folder(checkpoint_dir(), rank, every_rank)
    os.makedirs(folder, exist_ok=True)
    existing = list_checkpoints(folder)
    if step is None:
        step = existing[0].step + 1 if existing else 0
    path = _write_atomically(folder, state, int(step))
    for old in [c for c in list_checkpoints(folder) if c.path != path][keep - 1 :]:
        with contextlib.suppress(FileNotFoundError):
            os.remove(old.path)
    return path


def load_checkpoint(every_rank: bool = False, map_location: Any = None) -> Any:
    """The state of the latest complete checkpoint of this run, or None when there is none yet.

    Every rank may call it (rank 0's checkpoint is read from the shared folder). With ``every_rank=True``
    each rank reads its own (see `save_checkpoint`). `map_location` is passed to ``torch.load``.
    """
    from sparkrunner.ranks.api import rank_context

    folder = _rank_folder(checkpoint_dir(), rank_context().rank, every_rank)
    for found in list_checkpoints(folder):
        try:
            return _read(found.path, map_location)
        except Exception as exc:  # written by something else, or the disk lost it: fall back to the previous
            warnings.warn(
                f"checkpoint {found.path} could not be read ({exc}); trying the previous one",
                SparkRunnerWarning,
                stacklevel=2,
            )
    return None


def _rank_folder(folder: str, rank: int, every_rank: bool) -> str:
    return os.path.join(folder, f"rank{rank}") if every_rank else folder


def _write_atomically(folder: str, state: Any, step: int) -> str:
    """Temp file, fsync, rename, fsync the folder: the checkpoint appears complete or not at all."""
    _remove_stale_temps(folder)
    use_torch = "torch" in sys.modules
    final = os.path.join(folder, f"checkpoint-{step:012d}.{'pt' if use_torch else 'pkl'}")
    import tempfile  # (here: a rank's start does not need it)

    fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            if use_torch:
                sys.modules["torch"].save(state, f)
            else:
                pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temp)
        raise
    _fsync_folder(folder)
    return final


def _remove_stale_temps(folder: str) -> None:
    """A writer killed mid-write leaves its temp file: remove it (one writer per folder at a time)."""
    for name in os.listdir(folder):
        if name.startswith(_TEMP_PREFIX):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(folder, name))


def _fsync_folder(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: str, map_location: Any) -> Any:
    if path.endswith(".pt"):
        import torch

        # our own file, written by this run's rank 0: arbitrary objects are expected next to tensors
        return torch.load(path, map_location=map_location, weights_only=False)
    with open(path, "rb") as f:
        return pickle.load(f)
