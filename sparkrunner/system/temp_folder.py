"""Temp folders that are removed even when the process that made them is killed.

A lost executor SIGKILLs the barrier task that holds mpirun's folder (its host file and Open MPI's session
folder), so no `finally` runs there. Each folder therefore gets a watcher: a shell loop in a session of its own
that removes the folder once its maker has ended, then ends. `remove()` (the maker's own clean-up) removes the
folder and ends the watcher at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from sparkrunner.common.environment import Env
from sparkrunner.system.secret_files import SecretDrop
from sparkrunner.timeouts import FOLDER_WATCH_POLL_S

_WATCH = 'while kill -0 "$1" 2>/dev/null && [ -d "$2" ]; do sleep "$3"; done; rm -rf -- "$2"'


class WatchedFolder:
    """A new folder in the temp dir (`prefix` + random), removed by `remove()` or once this process ends."""

    def __init__(self, prefix: str) -> None:
        self.path = tempfile.mkdtemp(prefix=prefix)
        self._watcher = subprocess.Popen(
            [
                "sh",
                "-c",
                _WATCH,
                "sparkrunner-folder-watch",
                str(os.getpid()),
                self.path,
                str(FOLDER_WATCH_POLL_S),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not in this process's group: what kills the maker's group spares it
            env=_not_of_a_run(),
        )

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._watcher.kill()
        self._watcher.wait()

    def __enter__(self) -> WatchedFolder:
        return self

    def __exit__(self, *_: object) -> None:
        self.remove()


def _not_of_a_run() -> dict[str, str]:
    """This process's environment without a run's, attempt's or zygote lease's id: a sweep of their processes
    (a zygote's maker's, say) spares the watcher, which still has the folder to remove after them."""
    return {
        name: value
        for name, value in os.environ.items()
        if name not in (Env.RUN_ID, Env.ATTEMPT_ID, Env.ZYGOTE_LEASE_ID)
    }


class WatchedSecretDrop(SecretDrop):
    """A `SecretDrop` inside a `WatchedFolder` of its own: a barrier task killed with its executor (no `finally`
    runs there) leaves no secret folder in the executor's temp dir."""

    def __init__(self) -> None:
        self._watched = WatchedFolder("sparkrunner-task-secrets-")
        super().__init__(within=self._watched.path)

    def close(self) -> None:
        super().close()
        self._watched.remove()
