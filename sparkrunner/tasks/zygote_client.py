"""The barrier task's client of its executor's zygote: one zygote per run and executor, started by the first
task that needs it. Its socket is named by the run and the executor's Python daemon, which every task of that
executor shares; a lock file lets one task start it while the others wait."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator, Mapping

from sparkrunner.channel import messages as m
from sparkrunner.common.environment import Env
from sparkrunner.common.rank_job import ZygoteSpec
from sparkrunner.system import zygote_link
from sparkrunner.system.zygote_link import (
    Connected,
    ZygoteRank,
    connect,
    imports_environment,
    made_in_sockets_folder,
    named_socket,
    process_identity,
    start_zygote,
    zygote_variables,
)

_started: list[subprocess.Popen[bytes]] = []
"""Zygotes this Python worker started: polled, so one that ended is reaped (workers are reused)."""


def fork_rank(
    spec: ZygoteSpec, argv: list[str], env: Mapping[str, str], echo_to: int | None
) -> ZygoteRank | None:
    """The rank `argv` with `env`, forked by this executor's zygote for the run (started now if none listens);
    None when no zygote can serve (the task starts the rank cold)."""
    return zygote_link.fork_rank(lambda: _connect_or_start(spec, env), argv, env, echo_to)


def _connect_or_start(spec: ZygoteSpec, rank_env: Mapping[str, str]) -> Connected | None:
    """A connection to this executor's zygote for the run, started now (by this task alone) if none listens."""
    path = socket_path(spec.lease_id)
    with _locked(path + m.ZYGOTE_LOCK_SUFFIX):
        connected = connect(path, spec.key)
        if connected is None and _start(spec, path, rank_env):
            connected = connect(path, spec.key)
        return connected


def socket_path(lease_id: str) -> str:
    """This executor's zygote socket for the run: named by the run's zygote lease and the executor's Python
    daemon (this task's parent)."""
    return named_socket(f"{lease_id}:{_executor_daemon()}")


def _executor_daemon() -> str:
    """ "pid:start ticks" of the process that started this Python worker: the executor's Python daemon."""
    return process_identity(os.getppid())


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    fd = made_in_sockets_folder(path, lambda p: os.open(p, os.O_CREAT | os.O_RDWR, 0o600))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _start(spec: ZygoteSpec, path: str, rank_env: Mapping[str, str]) -> bool:
    """Start the run's zygote for this executor and wait until it listens; False when it does not in time."""
    for started in list(_started):
        if started.poll() is not None:
            _started.remove(started)
    zygote = start_zygote(_zygote_environment(spec, path, rank_env), spec.key)
    if zygote is not None:
        _started.append(zygote)
    return zygote is not None


def _zygote_environment(spec: ZygoteSpec, path: str, rank_env: Mapping[str, str]) -> dict[str, str]:
    """This task's environment with the ranks' PYTHONPATH and thread counts, the run's id and the zygote's own."""
    env = {name: value for name, value in os.environ.items() if name != Env.STARTED_BY_TASK}
    env.update(imports_environment(rank_env))
    env[Env.RUN_ID] = spec.run_id
    env[Env.ZYGOTE_LEASE_ID] = spec.lease_id
    env.update(zygote_variables(spec, path, _executor_daemon()))
    return env
