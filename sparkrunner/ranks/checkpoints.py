"""Checkpoints inside `main`: `save_checkpoint` writes whole, `load_checkpoint` reads the latest complete one.

A checkpoint is one file, ``checkpoint-<step>.pt`` (written with ``torch.save`` when torch is imported in the
rank) or ``checkpoint-<step>.pkl`` (pickle), in the run's checkpoint folder: a path or an object-store URI
(`sparkrunner.common.checkpoint_folder` says how each is written so that a crash mid-write leaves the previous
checkpoint as the latest, never a half-written one).

With ``background=True`` the state is snapshotted on the calling thread (tensors and arrays copied to host
memory, so training may change them at once) and serialised and written on a background thread. One save is in
flight per rank at most: the next save waits for it, and so do a graceful stop and the end of `main`, within
``stop_grace_s``; a write that failed is raised by the next save or at the end of `main`.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

from sparkrunner.common.checkpoint_dir import list_checkpoints
from sparkrunner.common.checkpoint_folder import CheckpointFolder, folder_at
from sparkrunner.common.environment import Env
from sparkrunner.errors import CheckpointDirError, SparkRunnerWarning


def checkpoint_dir() -> str:
    """The checkpoint folder (a path or a URI) of the run this rank belongs to, or a clear error when the run has
    none."""
    folder = os.environ.get(Env.CHECKPOINT_DIR)
    if not folder:
        raise CheckpointDirError(
            "this run has no checkpoint folder: pass Runner(..., checkpoint_dir='s3://bucket/prefix') or a folder "
            "every executor and the driver can read (np < 0 runs get one by default)"
        )
    return folder


def save_checkpoint(
    state: Any, step: int | None = None, keep: int = 2, every_rank: bool = False, background: bool = False
) -> str | None:
    """Write `state` as this run's latest checkpoint, whole; keep the newest `keep` checkpoints.

    Only rank 0 writes (other ranks return None at once), unless ``every_rank=True``: then each rank writes
    its own file in ``rank<N>/`` (for sharded states). `step` orders checkpoints (default: the latest + 1).
    ``background=True`` returns once the state is copied and writes it on a background thread (see the module).
    Returns the path or URI written (or being written).
    """
    from sparkrunner.ranks import anatomy
    from sparkrunner.ranks.api import rank_context

    if keep < 1:
        raise CheckpointDirError(f"keep={keep!r} would delete the checkpoint just written; use keep >= 1")
    rank = rank_context().rank
    if rank != 0 and not every_rank:
        return None
    anatomy.checkpoint_step()
    _BACKGROUND.wait()  # one save in flight at most; raises a failed one's error here
    folder = _rank_folder(checkpoint_dir(), rank, every_rank)
    if step is None:
        existing = list_checkpoints(folder)
        step = existing[0].step + 1 if existing else 0
    use_torch = "torch" in sys.modules
    name = f"checkpoint-{int(step):012d}.{'pt' if use_torch else 'pkl'}"
    if not background:
        return _write(folder, name, state, keep, use_torch)
    copied = _snapshot(state)
    _BACKGROUND.start(lambda: _write(folder, name, copied, keep, use_torch))
    return folder.child(name).uri


def load_checkpoint(every_rank: bool = False, map_location: Any = None) -> Any:
    """The state of the latest complete checkpoint of this run, or None when there is none yet.

    Every rank may call it (rank 0's checkpoint is read from the shared folder). With ``every_rank=True``
    each rank reads its own (see `save_checkpoint`). `map_location` is passed to ``torch.load``.
    """
    from sparkrunner.ranks.api import rank_context

    _BACKGROUND.wait()  # this rank's own save in flight is the newest
    folder = _rank_folder(checkpoint_dir(), rank_context().rank, every_rank)
    for found in list_checkpoints(folder):
        try:
            return _read(folder.read(found.name), found.name, map_location)
        except Exception as exc:  # written by something else, or the disk lost it: fall back to the previous
            warnings.warn(
                f"checkpoint {found.path} could not be read ({exc}); trying the previous one",
                SparkRunnerWarning,
                stacklevel=2,
            )
    return None


def wait_for_background_save(timeout: float | None = None) -> None:
    """Block until this rank's background save (if any) is written, up to `timeout` seconds; raise its error.
    The rank bootstrap calls it when `main` ends, and a graceful stop before the rank exits."""
    _BACKGROUND.wait(timeout)


def _snapshot(state: Any) -> Any:
    """A copy of `state` that training cannot change: tensors detached and copied to host memory, numpy arrays
    copied, containers rebuilt; any other object deep-copied."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        copied = type(state)()
        for key, value in state.items():
            copied[key] = _snapshot(value)
        return copied
    if isinstance(state, list):
        return [_snapshot(v) for v in state]
    if isinstance(state, tuple):
        values = [_snapshot(v) for v in state]
        return type(state)(*values) if hasattr(state, "_fields") else type(state)(values)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(state, numpy.ndarray):
        return state.copy()
    import copy

    return copy.deepcopy(state)


def _rank_folder(location: str, rank: int, every_rank: bool) -> CheckpointFolder:
    folder = folder_at(location)
    return folder.child(f"rank{rank}") if every_rank else folder


def _write(folder: CheckpointFolder, name: str, state: Any, keep: int, use_torch: bool) -> str:
    """Write `state` as `name`, then remove the older checkpoints beyond the newest `keep`."""

    def dump(stream: Any) -> None:
        if use_torch:
            sys.modules["torch"].save(state, stream)
        else:
            pickle.dump(state, stream, protocol=pickle.HIGHEST_PROTOCOL)

    written = folder.write(name, dump)
    for old in [c for c in list_checkpoints(folder) if c.name != name][keep - 1 :]:
        folder.remove(old.name)
    return written


def _read(data: bytes, name: str, map_location: Any) -> Any:
    if name.endswith(".pt"):
        import torch

        # our own file, written by this run's rank 0: arbitrary objects are expected next to tensors
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=False)
    return pickle.loads(data)


class _BackgroundSave:
    """The one save in flight on this rank, and the error of the last one that failed."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, write: Callable[[], object]) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(write,), name="sparkrunner-checkpoint", daemon=True
        )
        self._thread.start()

    def _run(self, write: Callable[[], object]) -> None:
        try:
            write()
        except BaseException as exc:  # raised by the next save or at the end of `main`, never dropped
            self._error = exc

    def wait(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                raise CheckpointDirError(
                    f"the background checkpoint save did not finish within {timeout:.0f} s (stop_grace_s)"
                )
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise CheckpointDirError(f"the background checkpoint save failed: {error}") from error


_BACKGROUND = _BackgroundSave()
