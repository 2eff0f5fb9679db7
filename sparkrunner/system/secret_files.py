"""Hands the run secret and the task agents' key to the processes that need them, never through a command line
or an environment variable (both are readable in /proc/PID of a rank, and children inherit the environment).

The process that spawns ranks (the driver for np < 0, a barrier task or its task agent for np > 0) writes
one-shot files into a private folder (0700, files 0600) and tells its children only the folder
(`Env.SECRET_DIR`, which holds no secret). Rank N on a host takes ``run-secret-N`` (its local rank: under
mpirun a rank learns nothing else before it starts); mpirun's rsh agent takes ``agent-key-HOST``. Each file is
deleted as it is read, and the spawner removes the folder with whatever was not taken when its ranks ended.
A spawner that was killed (Spark kills a cancelled task's Python worker) cannot: its folder is named after its
pid, and the next `SecretDrop` on that host removes the folders of spawners that are gone. Barrier tasks make
theirs in a folder that a watcher removes once the task is gone (`system.temp_folder.WatchedSecretDrop`), so a
lost executor leaves none behind either.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

from sparkrunner.common.environment import Env
from sparkrunner.errors import ChannelError


def _run_secret_name(local_rank: int) -> str:
    return f"run-secret-{local_rank}"


def _agent_key_name(host: str) -> str:
    return f"agent-key-{host}"


_FOLDER_PREFIX = "sparkrunner-secrets-"


class SecretDrop:
    """A private folder of one-shot secret files, removed by `close` (use it as a context manager)."""

    def __init__(self, within: str | None = None) -> None:
        """`within`: the folder to make it in (default: the temp dir), e.g. one removed when its maker is killed."""
        import tempfile  # (here, as in the next function: ranks import this module only to take their secret)

        _remove_folders_of_ended_spawners()
        self.path = tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{os.getpid()}-", dir=within)  # mode 0700

    def put(self, name: str, secret: bytes) -> None:
        fd = os.open(os.path.join(self.path, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secret)

    def put_run_secret(self, secret: bytes, local_ranks: Iterable[int]) -> None:
        for local_rank in local_ranks:
            self.put(_run_secret_name(local_rank), secret)

    def put_agent_key(self, key: bytes, hosts: list[str]) -> None:
        for host in hosts:
            self.put(_agent_key_name(host), key)

    def env(self) -> dict[str, str]:
        """What the spawned processes need to find their secret (only a folder name)."""
        return {Env.SECRET_DIR: self.path}

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> SecretDrop:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _remove_folders_of_ended_spawners() -> None:
    """Remove this user's secret folders whose spawner process no longer exists."""
    import glob
    import tempfile

    for folder in glob.glob(os.path.join(tempfile.gettempdir(), f"{_FOLDER_PREFIX}*-*")):
        pid = os.path.basename(folder)[len(_FOLDER_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and _owned_by_me(folder) and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _owned_by_me(path: str) -> bool:
    try:
        return os.stat(path).st_uid == os.getuid()
    except FileNotFoundError:  # removed meanwhile by another spawner's sweep
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _take(name: str) -> bytes:
    """Read and delete one secret file from the folder in `Env.SECRET_DIR`, and forget that folder."""
    folder = os.environ.get(Env.SECRET_DIR)
    if folder is None:
        raise ChannelError(f"{Env.SECRET_DIR} is not set: this process was not started by sparkrunner")
    path = os.path.join(folder, name)
    try:
        with open(path, "rb") as f:
            secret = f.read()
        os.unlink(path)
    except OSError as exc:
        raise ChannelError(f"cannot take this process's secret from {path}: {exc}") from exc
    return secret


def take_run_secret(local_rank: int) -> bytes:
    """In a rank: the run secret (once; the file is gone afterwards), and the folder is forgotten so the
    user's code and its children inherit nothing."""
    try:
        return _take(_run_secret_name(local_rank))
    finally:
        os.environ.pop(Env.SECRET_DIR, None)


def take_agent_key(host: str) -> bytes:
    """In mpirun's rsh agent: the key of the task agent on `host` (once per host)."""
    return _take(_agent_key_name(host))
