"""Where a run's checkpoints live: validated on the driver, verified on every rank before `main` starts.

For ``np > 0`` the folder must be one location that the driver and every executor see: a shared or mounted file
system, or an object store (``s3://...``; `sparkrunner.common.checkpoint_folder`). The driver drops a probe file
there; a rank that cannot see it fails at once with a clear error, because checkpoints written there would be
lost to the next attempt on another host.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

from sparkrunner.common.checkpoint_folder import CheckpointFolder, folder_at
from sparkrunner.common.environment import Env
from sparkrunner.errors import CheckpointDirError

log = logging.getLogger(__name__)

_PROBE_PREFIX = ".sparkrunner-probe-"
_SHARDED_NAME = re.compile(r"^sharded-(\d{12})$")
_SHARDED_COMPLETE = ".metadata"  # DCP writes it last: a folder without it is an incomplete save
_NAME = re.compile(r"^checkpoint-(\d{12})\.(pt|pkl)$")


@dataclass(frozen=True)
class CheckpointFile:
    """One complete checkpoint: its name in its folder, its full path or URI, its step."""

    name: str
    path: str
    step: int


def list_checkpoints(folder: CheckpointFolder) -> list[CheckpointFile]:
    """The complete checkpoints in `folder`, newest (highest step) first."""
    found = [
        CheckpointFile(n, _full(folder, n), int(m.group(1)))
        for n in folder.complete_names()
        if (m := _NAME.match(n))
    ]
    return sorted(found, key=lambda c: c.step, reverse=True)


def _full(folder: CheckpointFolder, name: str) -> str:
    return folder.child(name).uri


@dataclass
class RunCheckpoints:
    """The checkpoint folder of one run, and the probe that proves ranks see the driver's folder."""

    folder: str
    probe: str
    owned: bool
    """True when sparkrunner made the folder (np < 0 default) and removes it when the run ends."""

    @classmethod
    def open(cls, checkpoint_dir: str | None, run_id: str, on_driver_only: bool) -> RunCheckpoints:
        """The run's folder with the probe written; ``np > 0`` runs without `checkpoint_dir` get none.
        A location the driver cannot write (an unreachable bucket, a missing permission) fails here, before any
        rank starts."""
        if checkpoint_dir is None and not on_driver_only:
            return cls("", "", owned=False)
        import tempfile  # (here: every rank imports this module, only the driver opens the folder)

        owned = checkpoint_dir is None
        prefix = f"sparkrunner-checkpoints-{run_id[:12]}-"
        folder = folder_at(tempfile.mkdtemp(prefix=prefix) if owned else str(checkpoint_dir))
        probe_name = f"{_PROBE_PREFIX}{run_id}"
        try:
            folder.write(
                probe_name, lambda f: f.write(b"sparkrunner checks that every rank sees this folder\n")
            )
        except (OSError, ValueError) as exc:  # pyarrow's errors are OSErrors; a bad bucket name a ValueError
            raise CheckpointDirError(
                f"checkpoint_dir={folder.uri!r} cannot be written on the driver: {exc}"
            ) from exc
        return cls(folder.uri, folder.child(probe_name).uri, owned)

    def rank_env(self) -> dict[str, str]:
        return {Env.CHECKPOINT_DIR: self.folder, Env.CHECKPOINT_PROBE: self.probe} if self.folder else {}

    def close(self) -> None:
        """Remove the probe; remove the whole folder when sparkrunner made it."""
        if not self.folder:
            return
        if self.owned:
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)
        else:
            try:
                folder_at(self.folder).remove(_probe_name(self.probe))
            except OSError as exc:  # the run's outcome stands; a probe left on a store is one small object
                log.warning("could not remove %s: %s", self.probe, exc)


def verify_on_rank() -> None:
    """Inside a rank, before `main`: fail clearly when the driver's checkpoint folder is not visible here."""
    probe = os.environ.get(Env.CHECKPOINT_PROBE)
    location = os.environ.get(Env.CHECKPOINT_DIR, "")
    if not probe:
        return
    import socket

    name = _probe_name(probe)
    try:
        seen = folder_at(location).exists(name)
    except (OSError, ValueError, ImportError) as exc:
        raise CheckpointDirError(
            f"checkpoint_dir={location!r} cannot be reached from host {socket.gethostname()}: "
            f"{type(exc).__name__}: {exc}. Give every executor the same access as the driver (credentials in the "
            f"environment or the instance profile, the filesystem's package installed)."
        ) from exc
    if not seen:
        raise CheckpointDirError(
            f"checkpoint_dir={location!r} is not shared: the driver wrote {name} there, but host "
            f"{socket.gethostname()} does not see it. Use a location that the driver and every executor see: an "
            f"object store (s3://bucket/prefix, gs://, abfss://, hdfs://) or a file system they all mount (NFS, "
            f"/dbfs/...)."
        )


def _probe_name(probe: str) -> str:
    """The probe file's name in the folder, from its full path or URI."""
    return probe.rsplit("/", 1)[-1]


def list_sharded(folder: CheckpointFolder) -> list[CheckpointFile]:
    """The complete sharded checkpoints in `folder`, newest (highest step) first."""
    found = [
        CheckpointFile(name, _full(folder, name), int(match.group(1)))
        for name in folder.complete_names()
        if (match := _SHARDED_NAME.match(name)) and folder.child(name).exists(_SHARDED_COMPLETE)
    ]
    return sorted(found, key=lambda c: c.step, reverse=True)


def latest_step(location: str) -> int | None:
    """The step of the newest complete checkpoint at `location`, single-file or sharded (for the driver)."""
    folder = folder_at(location)
    steps = [c.step for c in [*list_checkpoints(folder)[:1], *list_sharded(folder)[:1]]]
    return max(steps, default=None)
