"""What a process forked to become a rank does, wherever it was forked from (an executor's or the driver's zygote,
`sparkrunner.ranks.zygote`, or a barrier task's own Python worker, `sparkrunner.tasks.rank_seeds`): take the rank's
output, environment, identity and argv, then run its module as a started rank would.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import sys
import tempfile

from sparkrunner.channel import messages as m
from sparkrunner.common.environment import Env
from sparkrunner.timeouts import ENV_PREFIX

_ARG_START, _ENV_END = 45, 48
"""Indexes of arg_start and env_end among /proc/self/stat's fields after the command name (fields 48-51)."""


def become_rank(request: m.Fork, output: int, forget: bool = True) -> int:
    """In the forked child: take on the rank's output, environment, identity and argv, then run its module; the
    exit code. `forget`: import sparkrunner again under the rank's environment (False: the caller made sure what it
    imported already was imported under the same timings)."""
    os.setsid()
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _fresh_stdio(request.env)
    os.chdir(request.cwd)
    take_environment(request.env)
    show_in_proc(request.argv, request.env)
    if forget:
        forget_sparkrunner()
    reseed()
    module = request.argv[2]
    sys.argv = [request.argv[0], *request.argv[3:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exit_code(exc.code)
    return 0


def _fresh_stdio(env: dict[str, str]) -> None:
    """sys.stdout and sys.stderr anew over file descriptors 1 and 2, as the interpreter makes them at its start
    (the forking process may have replaced its own, or buffered them otherwise)."""
    stdout = open(1, "w", closefd=False, encoding="utf-8")  # noqa: SIM115 (the interpreter's, for its lifetime)
    stdout.reconfigure(write_through=bool(env.get("PYTHONUNBUFFERED")))
    stderr = open(2, "w", closefd=False, encoding="utf-8", errors="backslashreplace", buffering=1)  # noqa: SIM115
    sys.stdout = stdout
    sys.stderr = stderr


def exit_code(code: object) -> int:
    """What the interpreter exits with for ``sys.exit(code)``."""
    if code is None or isinstance(code, int):
        return code or 0
    sys.stderr.write(f"{code}\n")  # as the interpreter shows a sys.exit("message") of the rank's own code
    return 1


def take_environment(env: dict[str, str]) -> None:
    """The rank's environment replaces the forking process's, in os.environ and in the C library's (what getenv
    reads), and its temp dir the forking process's; its PYTHONPATH entries not yet on sys.path come first."""
    os.environ.clear()
    ctypes.CDLL(None).clearenv()
    os.environ.update(env)
    tempfile.tempdir = None  # found again from the rank's TMPDIR, as in a rank started cold
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[0:0] = extra


def show_in_proc(argv: list[str], env: dict[str, str]) -> bool:
    """Write the rank's argv and environment over the forking process's in this process's own memory, where
    /proc/<pid>/cmdline and /proc/<pid>/environ read them: whoever looks for the run's processes (the task's
    sweep, `ps`, the tests) sees a rank as a started one. sparkrunner's variables come first (the run's and the
    attempt's ids, which sweeps look for), then the others while they fit: a zygote left room for all, a Spark
    Python worker did not (the rank's own environment, in `os.environ` and the C library's, is whole either way).
    False when something was left out."""
    with open("/proc/self/stat", "rb") as f:
        raw = f.read()
    fields = [int(x) for x in raw[raw.rindex(b")") + 2 :].split()[_ARG_START : _ENV_END + 1]]
    arg_start, arg_end, env_start, env_end = fields
    command = _command(argv, arg_end - arg_start)
    shown = _fitting(_identity_first(env), env_end - env_start)
    if command is not None:
        ctypes.memmove(arg_start, command.ljust(arg_end - arg_start, b"\0"), arg_end - arg_start)
    ctypes.memmove(env_start, shown.ljust(env_end - env_start, b"\0"), env_end - env_start)
    return command is not None and shown.count(b"\0") == len(env)


def _command(argv: list[str], room: int) -> bytes | None:
    """`argv` as /proc/<pid>/cmdline holds it, within `room` bytes: whole, else with the interpreter's name for
    its path (Spark 3.5's workers, ``python -m pyspark.daemon``, leave less room than a rank's module name needs);
    None when neither fits."""
    for shown in (argv, [os.path.basename(argv[0]), *argv[1:]]):
        command = b"\0".join(a.encode() for a in shown) + b"\0"
        if len(command) <= room:
            return command
    return None


_IDENTITY = (Env.RUN_ID, Env.ATTEMPT_ID, Env.STARTED_BY_TASK, Env.ZYGOTE_LEASE_ID)
"""What sweeps and tests look for in /proc/<pid>/environ: shown before anything else."""


def _identity_first(env: dict[str, str]) -> list[bytes]:
    """The entries of `env` in the order they are shown: the run's identity, sparkrunner's other variables, the
    rest; the shortest first within each (as many as possible fit)."""

    def order(name: str) -> tuple[bool, bool, int]:
        return name not in _IDENTITY, not name.startswith(ENV_PREFIX), len(name) + len(env[name])

    return [f"{name}={env[name]}".encode() + b"\0" for name in sorted(env, key=order)]


def _fitting(entries: list[bytes], room: int) -> bytes:
    """As many of `entries`, in order, as fit in `room` bytes (an entry that does not fit is skipped)."""
    shown = b""
    for entry in entries:
        if len(shown) + len(entry) <= room:
            shown += entry
    return shown


def forget_sparkrunner(parts: tuple[str, ...] | None = None) -> None:
    """sparkrunner's modules read the environment when imported (timings, names): the rank imports them
    again under its own. Third-party modules (torch, numpy, cloudpickle) stay: they are what the fork saves.
    `parts`: only the modules with one of these names in their dotted path."""
    for name in [n for n in sys.modules if n == "sparkrunner" or n.startswith("sparkrunner.")]:
        if parts is None or any(part in parts for part in name.split(".")):
            del sys.modules[name]


def reseed() -> None:
    """A fork copies the random state: numpy's global generator is seeded anew, as in a fresh process (Python's
    `random` reseeds itself after a fork)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
