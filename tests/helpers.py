"""Test helpers that inspect the real process table."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.waiting import poll_until

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"

# Every process this pytest starts (drivers, executors, ranks) inherits this tag, so the process-table checks
# below see this session's ranks only, never those of another test session on the same machine.
TEST_SESSION_ENV = "SPARKRUNNER_TEST_SESSION"
_RUN_ID_PREFIX = b"SPARKRUNNER_RUN_ID="
_DRIVER_ZYGOTE_PREFIX = b"SPARKRUNNER_DRIVER_ZYGOTE="


def environ_of(pid: str) -> list[bytes] | None:
    """Process `pid`'s environment as ``NAME=value`` entries, read from /proc; None when it ended or is a zombie."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return None
    except OSError:
        return None  # it ended meanwhile, or is not ours to read
    return env


def session_processes() -> Iterator[tuple[int, list[bytes], str]]:
    """This test session's live processes but this one: (pid, environment entries, command line), from /proc."""
    session = f"{TEST_SESSION_ENV}={os.environ[TEST_SESSION_ENV]}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        env = environ_of(pid)
        if env is None or session not in env:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                yield int(pid), env, f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue


def rank_processes(run_id: str | None = None) -> dict[int, str]:
    """This test session's live processes that carry a sparkrunner run id (when `run_id` is given: that run's, its
    later attempts' (``<run_id>-attempt1``) and its zygotes' (``<run_id>-zygote``) only).

    Scans /proc itself: the tests' oracle is independent of the library's own clean-up code.
    """
    wanted = None if run_id is None else _RUN_ID_PREFIX + run_id.encode()
    return {
        pid: cmd
        for pid, env, cmd in session_processes()
        if any(e.startswith(_RUN_ID_PREFIX) if wanted is None else _names_run(e, wanted) for e in env)
    }


def driver_zygotes(driver_pid: int | None = None) -> dict[int, int]:
    """This test session's live import zygotes that a driver process keeps for np < 0 runs (all drivers', or
    `driver_pid`'s), pid -> the driver's pid, read from each process's environment in /proc. An idle zygote carries
    no run id, so `rank_processes` never counts it; a rank it forked carries its run's, so it counts as any rank."""
    session = f"{TEST_SESSION_ENV}={os.environ[TEST_SESSION_ENV]}".encode()
    found: dict[int, int] = {}
    for pid in os.listdir("/proc"):
        env = environ_of(pid) if pid.isdigit() else None
        if env is None or session not in env:
            continue
        for entry in env:
            if entry.startswith(_DRIVER_ZYGOTE_PREFIX):
                driver = int(entry[len(_DRIVER_ZYGOTE_PREFIX) :].split(b":")[0])
                if driver_pid is None or driver == driver_pid:
                    found[int(pid)] = driver
    return found


def parent_of(pid: int) -> int:
    """`pid`'s parent, read from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def _names_run(entry: bytes, wanted: bytes) -> bool:
    """`entry` is ``SPARKRUNNER_RUN_ID=`` the wanted run's id, or an id derived from it (``<id>-...``)."""
    return entry == wanted or entry.startswith(wanted + b"-")


def leftover_rank_processes(grace_s: float = 0.0) -> dict[int, str]:
    """Live processes that carry a sparkrunner run id, after waiting up to `grace_s` for them to go."""
    poll_until(lambda: not rank_processes(), grace_s)
    return rank_processes()


def driver(name: str) -> Path:
    """The program `tests/programs/<name>.py`."""
    return PROGRAMS / f"{name}.py"


def start_driver(name: str, *argv: str, stdin: int | None = None) -> subprocess.Popen[str]:
    """Run `tests/programs/<name>.py argv...` as a separate driver process (its own interpreter, and
    SparkSession if it makes one); `stdin` as subprocess.Popen takes it (PIPE: the test writes to it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen(
        [sys.executable, str(driver(name)), *argv],
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen[str], text: str, seconds: float = 120) -> list[str]:
    """Read the driver's output until a line contains `text`."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    raise AssertionError(f"never saw {text!r}; output was:\n{''.join(seen)}")


def run_driver(name: str, *argv: str, seconds: float = 180) -> str:
    """Run `tests/programs/<name>.py argv...` to its end and return everything it printed."""
    out, _ = start_driver(name, *argv).communicate(timeout=seconds)
    return out


def line_of(path: Path, text: str) -> int:
    """The number of the first line of `path` that contains `text`."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


_TCP_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


def fd_targets(pid: int) -> list[str]:
    """What process `pid`'s open file descriptors point at (/proc/PID/fd links: paths, "socket:[inode]", ...);
    descriptors closed while they are read are left out."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return targets


def _socket_inodes(pid: int) -> set[int]:
    return {int(t[len("socket:[") : -1]) for t in fd_targets(pid) if t.startswith("socket:[")}


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(local address in /proc's hex, port) of every TCP socket (IPv4 and IPv6) process `pid` listens on."""
    mine = _socket_inodes(pid)
    found = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == _TCP_LISTEN and int(fields[9]) in mine:
                    address, port = fields[1].rsplit(":", 1)
                    found.add((address, int(port, 16)))
    return found


def file_stats(folders: dict[str, Path]) -> dict[str, tuple[int, int]]:
    """(size, modification time) of every file under `folders`: compare two calls to see what was written."""
    return {
        str(path): (path.stat().st_size, path.stat().st_mtime_ns)
        for folder in folders.values()
        for path in folder.rglob("*")
        if path.is_file()
    }


def driver_url(spark: Any) -> str:
    """The `--driver-url` on the command line of every executor JVM of `spark`'s application.

    Unlike the application id (`app-<second>-0000` on each local-cluster), no other Spark application on this
    machine shares it: two test workers may start their clusters in the same second."""
    conf = spark.sparkContext.getConf()
    return f"spark://CoarseGrainedScheduler@{conf.get('spark.driver.host')}:{conf.get('spark.driver.port')}"


def stop_forgetting(spark: Any, settings: Any) -> None:
    """Stop `spark` and clear `settings` (names) from its JVM: a stopped session's settings stay there as system
    properties, and the next session's conf would have them."""
    for name in settings:
        spark._jvm.System.clearProperty(name)
    spark.stop()
