"""Floods and port scans against the driver channel: real sockets from a separate hostile process.

The channel must neither start a thread per unauthenticated connection nor let its accept loop die, so a run
(np=-2, both launchers) finishes while 3,000 idle connections are held, and after a port scan.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from sparkrunner import Runner
from sparkrunner.channel import ChannelServer, Connection, connect, new_secret
from tests.matrix import LAUNCHERS
from tests.waiting import poll_until, wait_until

FLOODER = Path(__file__).with_name("flooder.py")
FLOOD = 3000


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _listening_ports() -> set[int]:
    return {
        c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN
    }


def _speaks_first(port: int) -> bool:
    """Whether the server at `port` sends bytes before the client says anything, as the channel does (its
    handshake nonce); the other servers of a run (the direct launcher's Horovod rendezvous, HTTP) wait."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
            return len(probe.recv(1)) == 1
    except OSError:
        return False


class Flood:
    """A flooder process aimed at the channel: the new listening port of this process that speaks first."""

    def __init__(self, mode: str, count: int, tmp_path: Path) -> None:
        self.ready = tmp_path / f"flood-{mode}-{count}.ready"
        self.proc = subprocess.Popen(
            [sys.executable, str(FLOODER), mode, str(count), str(self.ready)],
            stdin=subprocess.PIPE,
            text=True,
        )
        self.max_threads = 0
        self._before = _listening_ports()
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._aim, daemon=True)

    def start_watching(self) -> None:
        self._watch.start()

    def aim(self, port: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{port}\n")
        self.proc.stdin.flush()

    def _aim(self) -> None:
        """Wait for the run's channel to listen, aim the flood at it, then watch this process's threads."""
        while not self._stop.is_set():
            channel = [port for port in _listening_ports() - self._before if _speaks_first(port)]
            if channel:
                self.aim(channel[0])
                break
            time.sleep(0.005)
        while not self._stop.wait(0.05):
            self.max_threads = max(self.max_threads, _threads())

    def made(self, seconds: float = 60) -> int:
        count = wait_until(
            lambda: self.ready.exists() and self.ready.read_text(), seconds, "the flood's count"
        )
        return int(count)

    def end(self) -> None:
        self._stop.set()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture()
def flood_factory(tmp_path: Path) -> Iterator[Any]:
    floods: list[Flood] = []

    def make(mode: str, count: int = FLOOD) -> Flood:
        floods.append(Flood(mode, count, tmp_path))
        return floods[-1]

    yield make
    for flood in floods:
        flood.end()


def wait_for_flood(ready_file: str) -> int:
    """The ranks' function: stay in the run until the flood is in place, so the run spans it."""
    import os

    poll_until(lambda: os.path.exists(ready_file), 120)
    print("rank saw the flood", flush=True)
    return int(os.environ["RANK"])


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("mode", ["idle", "scan"])
def test_a_run_finishes_through_a_flood(launcher: str, mode: str, flood_factory: Any, capfd: Any) -> None:
    """np=-2: a flood aimed at the driver channel the moment it listens; the ranks still connect and finish."""
    flood = flood_factory(mode)
    baseline = _threads()
    flood.start_watching()
    runner = Runner(np=-2, launcher=launcher, tracking=False, progress=False, start_timeout=120, timeout=240)
    assert runner.run(wait_for_flood, str(flood.ready)) == 0
    assert flood.made() == FLOOD
    assert capfd.readouterr().out.count("rank saw the flood") == 2
    assert flood.max_threads < baseline + 40, f"{flood.max_threads} threads (was {baseline}) during the flood"


class Echo:
    def __init__(self) -> None:
        self.messages: list[tuple[str, Any]] = []

    def on_message(self, conn: Connection, kind: str, data: Any) -> None:
        self.messages.append((kind, data))
        conn.send("echo", data)


def _round_trip(server: ChannelServer, secret: bytes, data: Any) -> Any:
    conn = connect(("127.0.0.1", server.port), secret)
    try:
        conn.send("ping", data)
        return conn.recv()
    finally:
        conn.close()


@pytest.mark.slow
def test_the_channel_serves_while_3000_idle_connections_are_held(flood_factory: Any) -> None:
    secret = new_secret()
    echo = Echo()
    server = ChannelServer(secret, echo.on_message, lambda _: None)
    try:
        baseline = _threads()
        flood = flood_factory("idle")
        flood.aim(server.port)
        assert flood.made() == FLOOD
        assert _threads() < baseline + 5  # no thread per unauthenticated connection
        assert _round_trip(server, secret, "during") == ("echo", "during")
        assert server.rejected >= FLOOD - 200  # the oldest idle handshakes were dropped to make room
    finally:
        server.close()


def test_the_accept_loop_survives_running_out_of_file_descriptors(
    flood_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With this process's descriptor limit just above what it uses, accept() fails with EMFILE for a while."""
    secret = new_secret()
    echo = Echo()
    server = ChannelServer(secret, echo.on_message, lambda _: None)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    flood = flood_factory("idle", 300)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 20, hard))
        flood.aim(server.port)
        # the flood fills every descriptor the server may still open: the accept loop says so when it hits that
        wait_until(lambda: _out_of_descriptors(caplog), 60, "the channel running out of file descriptors")
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert flood.made() > 0
        assert server._thread.is_alive()
        assert _round_trip(server, secret, "after") == ("echo", "after")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        server.close()


def _out_of_descriptors(caplog: pytest.LogCaptureFixture) -> bool:
    return any("could not accept a connection" in r.getMessage() for r in list(caplog.records))


def test_a_client_is_refused_with_a_clear_error_when_nobody_listens() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Exception, match="cannot reach the driver"):
        connect(("127.0.0.1", port), new_secret(), timeout=2)
