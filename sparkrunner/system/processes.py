"""Process-tree hygiene: spawn rank processes that die with their parent, and find or kill what a run left."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sparkrunner.channel.lines import LineSplitter
from sparkrunner.common.environment import Env
from sparkrunner.timeouts import (
    DIRECT_POLL_S,
    PROCESS_KILL_WAIT_S,
    PROCESS_READER_JOIN_S,
    PROCESS_READER_POLL_S,
    SWEEP_GRACE_S,
    SWEEP_POLL_S,
)

_PR_SET_PDEATHSIG = 1


def native_threads() -> int:
    """This process's threads, native ones included (a library's pool started by an import is no Python thread)."""
    return len(os.listdir("/proc/self/task"))


def die_with_parent() -> None:
    """Runs in the child before exec: ask Linux to SIGKILL it when the spawning thread's process dies."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` sparkrunner reads: the state letter (R, S, T, Z...), the parent, and
    the start time in clock ticks since boot (which tells a reused pid apart)."""

    state: str
    ppid: int
    start_ticks: int


def parse_stat(raw: bytes) -> ProcStat:
    """Parse ``/proc/<pid>/stat``: the command name may hold spaces and ')', so fields follow the last ')'."""
    fields = raw[raw.rindex(b")") + 2 :].split()
    return ProcStat(fields[0].decode(), int(fields[1]), int(fields[19]))


def proc_stat(pid: int | str) -> ProcStat | None:
    """`pid`'s stat on this machine, or None when it is gone (or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return parse_stat(f.read())
    except OSError:
        return None


def proc_strings(pid: int | str, name: str) -> list[bytes]:
    """``/proc/<pid>/<name>`` split at its NULs (``cmdline``: the argv; ``environ``: VAR=value entries); empty
    when the process is gone or not ours to read."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := proc_stat(entry)) is not None:
            children.setdefault(stat.ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """All live descendants of `pid` (children first), read from /proc."""
    tree = _children_map()
    found: list[int] = []
    todo = list(tree.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(tree.get(child, []))
    return found


def kill_all(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_and_wait(pids: Iterable[int], timeout_s: float = PROCESS_KILL_WAIT_S) -> None:
    """SIGKILL `pids` and wait (up to `timeout_s`) until each has ended: a killed process still runs its exit
    (closing its files and sockets) for a while after its memory, and with it its environment, is gone."""
    started = {pid: stat.start_ticks for pid in pids if (stat := proc_stat(pid)) is not None}
    kill_all(started)
    deadline = time.monotonic() + timeout_s
    while any(_still_running(pid, ticks) for pid, ticks in started.items()) and time.monotonic() < deadline:
        time.sleep(SWEEP_POLL_S)


def _still_running(pid: int, start_ticks: int) -> bool:
    """`pid` is the process that started at `start_ticks` (not a new one given the same pid) and has not ended."""
    stat = proc_stat(pid)
    return stat is not None and stat.start_ticks == start_ticks and stat.state != "Z"


def processes_of_attempt(attempt_id: str | None, task: int | None = None) -> list[int]:
    """Pids of live processes on this machine whose environment carries this attempt's id (any attempt's for
    None); with `task`, only those that barrier task `task` started (its rank, its mpirun, its agent's daemons)."""
    prefix = f"{Env.ATTEMPT_ID}=".encode()
    wanted = [] if attempt_id is None else [prefix + attempt_id.encode()]
    if task is not None:
        wanted.append(f"{Env.STARTED_BY_TASK}={task}".encode())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        env = proc_strings(entry, "environ")
        ours = any(e.startswith(prefix) for e in env) and all(w in env for w in wanted)
        if ours and (stat := proc_stat(entry)) is not None and stat.state != "Z":
            found.append(int(entry))
    return found


def processes_with(variable: str, value: str) -> list[int]:
    """Pids of live processes on this machine (other than this one) whose environment sets `variable` to `value`."""
    wanted = f"{variable}={value}".encode()
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit()
        and int(entry) != os.getpid()
        and wanted in proc_strings(entry, "environ")
        and not ended(int(entry))
    ]


def stopped(pids: Iterable[int]) -> list[int]:
    """Those of `pids` stopped by a signal (SIGSTOP, SIGTSTP): they cannot act on SIGTERM until continued."""
    return [pid for pid in pids if (stat := proc_stat(pid)) is not None and stat.state in ("T", "t")]


def continue_stopped(pids: Iterable[int]) -> None:
    """SIGCONT those of `pids` that are stopped, so they act on a stop (SIGTERM, the driver's `Stop`)."""
    kill_all(stopped(pids), signal.SIGCONT)


def ended(pid: int) -> bool:
    """True once `pid` has ended on this machine (gone, or a zombie its parent has not reaped yet)."""
    stat = proc_stat(pid)
    return stat is None or stat.state == "Z"


def sweep_attempt(attempt_id: str, task: int | None = None, grace_s: float = SWEEP_GRACE_S) -> dict[int, str]:
    """Kill every process of the attempt still on this machine (only barrier task `task`'s, when given): wait
    up to `grace_s` for them to end on their own first; returns the pids that had to be killed, with their
    command lines (what was left says which part of the stop path missed it)."""
    return sweep(lambda: processes_of_attempt(attempt_id, task), grace_s)


def sweep(find: Callable[[], list[int]], grace_s: float = SWEEP_GRACE_S) -> dict[int, str]:
    """Kill the processes `find` returns once they have had `grace_s` to end on their own; the pids that had to
    be killed, with their command lines."""
    deadline = time.monotonic() + grace_s
    leftover = find()
    while leftover and time.monotonic() < deadline:
        time.sleep(SWEEP_POLL_S)
        leftover = find()
    commands = {pid: command_line(pid) for pid in leftover}
    kill_and_wait(leftover)
    return commands


def command_line(pid: int, limit: int = 120) -> str:
    """`pid`'s argv joined by spaces and cut at `limit` characters, for a log line ("" once it has ended)."""
    argv = b" ".join(part for part in proc_strings(pid, "cmdline") if part).decode(errors="replace")
    return argv if len(argv) <= limit else argv[: limit - 3] + "..."


def described(commands: dict[int, str]) -> str:
    """`sweep`'s answer as a log line reads it: "pid (command), ..."."""
    return ", ".join(f"{pid} ({command or 'ended'})" for pid, command in commands.items())


class OutputTail:
    """Drains a process's output pipe (read end `fd`, owned from now on: closed at the pipe's end) into a bounded
    tail of lines, copying each chunk to `echo_to` when given; a reader thread does it, so the writer never blocks
    on a full pipe."""

    def __init__(self, fd: int, echo_to: int | None = None, tail_lines: int = 200) -> None:
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self._fd, self._echo_to = fd, echo_to
        self._reading = threading.Event()
        """Set while the reader waits in `read` with every chunk before kept: it holds nothing unread."""
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        """Keep the last lines (each cut to a bound, progress updates left out) in linear time."""
        splitter = LineSplitter()
        try:
            while True:
                self._reading.set()
                chunk = os.read(self._fd, 65536)
                self._reading.clear()
                if not chunk:
                    break
                self.tail.extend(splitter.feed(chunk)[0])
                if self._echo_to is not None:
                    with contextlib.suppress(OSError):
                        os.write(self._echo_to, chunk)
        finally:
            os.close(self._fd)  # a driver that lives for days starts thousands of ranks
        last = splitter.flush()
        if last is not None:
            self.tail.append(last)

    def join(self) -> None:
        """Wait until the reader has kept everything the ended process wrote: until the pipe's end, or until it
        waits on an empty pipe that a descendant (a daemon the process left) still holds open."""
        deadline = time.monotonic() + PROCESS_READER_JOIN_S
        while self._reader.is_alive() and time.monotonic() < deadline:
            if self._reading.is_set() and self._unread_bytes() == 0 and self._reading.is_set():
                return  # (set again after the count: a chunk read meanwhile was kept before the next read)
            self._reader.join(timeout=PROCESS_READER_POLL_S)

    def _unread_bytes(self) -> int:
        """How many bytes wait in the output pipe (-1 when it is closed)."""
        try:
            packed = fcntl.ioctl(self._fd, termios.FIONREAD, b"\0\0\0\0")
        except (OSError, ValueError):
            return -1
        return int(struct.unpack("i", packed)[0])

    def last_lines(self, lines: int = 40) -> str:
        return "\n".join(list(self.tail)[-lines:])


class RankHandle(Protocol):
    """What a launcher waits on: a started `RankProcess`, or a rank an executor's zygote forked."""

    @property
    def pid(self) -> int: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def output_tail(self, lines: int = 40) -> str: ...
    def kill(self) -> None: ...


class LocalRank:
    """A rank process on this machine (started, or forked by a zygote or a barrier task's seed), known by its
    `poll`: wait, output tail and kill over it. Subclasses set `pid` and `output`."""

    pid: int
    output: OutputTail

    def poll(self) -> int | None:
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout or 0)
            time.sleep(DIRECT_POLL_S)
        self.output.join()
        return code

    def output_tail(self, lines: int = 40) -> str:
        return self.output.last_lines(lines)

    def kill(self) -> None:
        """SIGKILL the rank and every descendant; then wait (bounded) for its end."""
        kill_tree(self.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(PROCESS_KILL_WAIT_S)


class RankProcess(LocalRank):
    """A child process (a rank, or mpirun) whose output is drained into a bounded tail.

    The child is its own session leader, dies with its parent, and `kill()` takes its whole tree down.
    """

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        echo_to: int | None = None,
        tail_lines: int = 200,
        cwd: str | None = None,
    ) -> None:
        self.popen = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
            cwd=cwd,
        )
        assert self.popen.stdout is not None
        self.pid = self.popen.pid
        self.output = OutputTail(os.dup(self.popen.stdout.fileno()), echo_to, tail_lines)
        self.popen.stdout.close()  # the tail owns the pipe's read end now

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        code = self.popen.wait(timeout)
        self.output.join()
        return code


def kill_tree(pid: int) -> None:
    """SIGKILL `pid`, its process group and every descendant (they may have left its group); wait until ended."""
    tree = [*descendants(pid), pid]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    kill_and_wait(tree)
