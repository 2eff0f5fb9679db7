"""The rank-side API: who am I in this run, and how to talk to the driver from inside `main`."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from sparkrunner.channel import ChannelError, Connection
from sparkrunner.channel import messages as m
from sparkrunner.common.environment import Env

_connection: Connection | None = None

# mpirun sets OpenMPI's variables per rank; map them onto the names every framework reads.
_MPI_NAMES = {
    "RANK": "OMPI_COMM_WORLD_RANK",
    "WORLD_SIZE": "OMPI_COMM_WORLD_SIZE",
    "LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_RANK",
    "LOCAL_WORLD_SIZE": "OMPI_COMM_WORLD_LOCAL_SIZE",
}


@dataclass(frozen=True)
class RankContext:
    """This process's place in the run. Outside a run it describes a single process (rank 0 of 1)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    attempt: int = 0
    """0 on the first attempt of the run, then 1, 2, ... when `Runner(max_failures=...)` retries (or an
    elastic run, ``np=(min, max)``, restarts at another size)."""

    @property
    def stop_reason(self) -> str | None:
        """Once `sparkrunner.stopping()` is true: ``"rescale"`` when an elastic run restarts at a new size
        (save a checkpoint and return), else ``"stop"``; None while the rank is not stopping."""
        from sparkrunner.ranks.graceful_stop import stop_reason

        return stop_reason()

    @classmethod
    def from_env(cls) -> RankContext:
        def read(name: str, default: int) -> int:
            value = os.environ.get(name) or os.environ.get(_MPI_NAMES[name])
            return int(value) if value is not None else default

        attempt = int(os.environ.get(Env.ATTEMPT) or 0)
        return cls(
            read("RANK", 0),
            read("WORLD_SIZE", 1),
            read("LOCAL_RANK", 0),
            read("LOCAL_WORLD_SIZE", 1),
            attempt,
        )


def adopt_mpi_environment() -> None:
    """Copy OpenMPI's per-rank variables to RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE when unset."""
    for name, mpi_name in _MPI_NAMES.items():
        if name not in os.environ and mpi_name in os.environ:
            os.environ[name] = os.environ[mpi_name]


def rank_context() -> RankContext:
    """Rank, world size and local rank of the calling process (usable inside `main`)."""
    return RankContext.from_env()


def in_run() -> bool:
    """True inside a rank started by sparkrunner."""
    return _connection is not None


def attach(connection: Connection | None) -> None:
    """Called by the worker bootstrap: route rank-side messages through `connection`."""
    global _connection
    _connection = connection


def send_to_driver(message: m.Message) -> bool:
    """Send one message to the driver; returns False when not inside a run (or the driver is gone)."""
    conn = _connection
    if conn is None:
        return False
    try:
        m.send(conn, message)
    except ChannelError:
        return False
    return True


def send_file_to_driver(path: str) -> bool:
    """Copy a file this rank wrote (e.g. a Horovod timeline) to the driver, which saves it and reports where.

    Returns False when not inside a run or the file cannot be read.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return send_to_driver(m.File(os.path.basename(path), data))


def log_to_driver(message: str) -> None:
    """Show `message` in the driver's output (the notebook), whatever `driver_log_verbosity` is.

    Outside a run (e.g. when testing `main` directly) the message is printed locally.
    """
    if not send_to_driver(m.Log(str(message))):
        print(message, file=sys.stderr, flush=True)
