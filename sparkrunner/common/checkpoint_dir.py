"""Where a run's checkpoints live: validated on the driver, verified on every rank before `main` starts.

For ``np > 0`` the folder must be one path that the driver and every executor see (a shared or mounted file
system). The driver drops a probe file there; a rank that cannot see it fails at once with a clear error,
because checkpoints written there would be lost to the next attempt on another host.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from sparkrunner.channel.environment import Env
from sparkrunner.errors import CheckpointDirError

_PROBE_PREFIX = ".sparkrunner-probe-"
_SHARDED_NAME = re.compile(r"^sharded-(\d{12})$")
_SHARDED_COMPLETE = ".metadata"  # DCP writes it last: a folder without it is an incomplete save
_NAME = re.compile(r"^checkpoint-(\d{12})\.(pt|pkl)$")


@dataclass(frozen=True)
class CheckpointFile:
    """One complete checkpoint on disk."""

    path: str
    step: int


def list_checkpoints(folder: str) -> list[CheckpointFile]:
    """The complete checkpoints in `folder`, newest (highest step) first."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = [CheckpointFile(os.path.join(folder, n), int(m.group(1))) for n in names if (m := _NAME.match(n))]
    return sorted(found, key=lambda c: c.step, reverse=True)


@dataclass
class RunCheckpoints:
    """The checkpoint folder of one run, and the probe that proves ranks see the driver's folder."""

    folder: str
    probe: str
    owned: bool
    """True when sparkrunner made the folder (np < 0 default) and removes it when the run ends."""

    @classmethod
    def open(cls, checkpoint_dir: str | None, run_id: str, on_driver_only: bool) -> RunCheckpoints:
        """The run's folder with the probe written; ``np > 0`` runs without `checkpoint_dir` get none."""
        if checkpoint_dir is None and not on_driver_only:
            return cls("", "", owned=False)
        import tempfile  # (here: every rank imports this module, only the driver opens the folder)

        owned = checkpoint_dir is None
        prefix = f"sparkrunner-checkpoints-{run_id[:12]}-"
        folder = os.path.abspath(tempfile.mkdtemp(prefix=prefix) if owned else str(checkpoint_dir))
        try:
            os.makedirs(folder, exist_ok=True)
            probe = os.path.join(folder, f"{_PROBE_PREFIX}{run_id}")
            with open(probe, "w") as f:
                f.write("sparkrunner checks that every rank sees this folder\n")
        except OSError as exc:
            raise CheckpointDirError(
                f"checkpoint_dir={folder!r} cannot be written on the driver: {exc}"
            ) from exc
        return cls(folder, probe, owned)

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
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.probe)


def verify_on_rank() -> None:
    """Inside a rank, before `main`: fail clearly when the driver's checkpoint folder is not visible here."""
    probe = os.environ.get(Env.CHECKPOINT_PROBE)
    if probe and not os.path.exists(probe):
        import socket

        raise CheckpointDirError(
            f"checkpoint_dir={os.path.dirname(probe)!r} is not shared: the driver wrote {os.path.basename(probe)} "
            f"there, but host {socket.gethostname()} does not see it. Use a path on a file system that the driver "
            f"and every executor mount (NFS, /dbfs/..., a FUSE-mounted bucket)."
        )


def list_sharded(folder: str) -> list[CheckpointFile]:
    """The complete sharded checkpoints in `folder`, newest (highest step) first."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = [
        CheckpointFile(os.path.join(folder, name), int(match.group(1)))
        for name in names
        if (match := _SHARDED_NAME.match(name))
        and os.path.exists(os.path.join(folder, name, _SHARDED_COMPLETE))
    ]
    return sorted(found, key=lambda c: c.step, reverse=True)


def latest_step(folder: str) -> int | None:
    """The step of the newest complete checkpoint in `folder`, single-file or sharded (for the driver)."""
    steps = [c.step for c in [*list_checkpoints(folder)[:1], *list_sharded(folder)[:1]]]
    return max(steps, default=None)
