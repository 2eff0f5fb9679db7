"""Fuzzing the driver channel with real sockets: random bytes before and after the handshake, bad lengths and
flags, flipped bits in header, ciphertext and tag, replayed, reordered and cross-connection records.

Every hostile frame carries a booby-trapped pickle that creates a file when unpickled: the file must never
appear, and afterwards the same attempt channel still serves a real rank (direct launcher, np=-1 placement).
"""

from __future__ import annotations

import io
import pickle
import random
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrunner.channel import ChannelServer, Connection, connect, new_secret, transport
from sparkrunner.channel.payload import dumps_call
from sparkrunner.common.rank_job import RankJob
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.launch.direct import DirectLauncher
from sparkrunner.placement.local import LocalPlacement
from tests.waiting import poll_until

SEED = 20261122
CASES = 300


class Booby:
    """Unpickling this creates `path` (builtins.open in write mode)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> Any:
        return (io.open, (self.path, "w"))


def _await_close(sock: socket.socket) -> None:
    """Half-close our side and wait until the server drops the connection (it must, within its timeouts)."""
    sock.settimeout(15)
    try:
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
    except OSError:
        pass  # reset by the server: dropped too
    finally:
        sock.close()


def _raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=15)


def _sealed(conn: Connection, kind: str, data: Any) -> list[bytes]:
    """The records `conn.send(kind, data)` would write, without writing them."""
    body = memoryview(pickle.dumps((kind, data)))
    size = transport.RECORD_BYTES
    return [
        conn._sender.seal(body[i : i + size], last=i + size >= len(body)) for i in range(0, len(body), size)
    ]


def _flip(record: bytes, rng: random.Random) -> bytes:
    position = rng.randrange(len(record))
    return record[:position] + bytes([record[position] ^ (1 << rng.randrange(8))]) + record[position + 1 :]


def fuzz_cases(port: int, secret: bytes, trap: bytes, booby: Booby) -> list[Callable[[random.Random], None]]:
    """Hostile clients; each opens its own connection and leaves once the server dropped it."""

    def before_handshake(rng: random.Random) -> None:
        sock = _raw(port)
        sock.recv(32)
        sock.sendall(rng.randbytes(rng.randrange(0, 100)) + trap)
        _await_close(sock)

    def wrong_secret(rng: random.Random) -> None:
        with pytest.raises(transport.ChannelError):
            connect(("127.0.0.1", port), rng.randbytes(32), timeout=5)

    def after_handshake_random(rng: random.Random) -> None:
        conn = connect(("127.0.0.1", port), secret)
        conn._sock.sendall(rng.randbytes(rng.randrange(1, 3000)) + trap)
        _await_close(conn._sock)

    def bad_length_or_flags(rng: random.Random) -> None:
        conn = connect(("127.0.0.1", port), secret)
        length = rng.choice([0, 1, 15, transport.RECORD_BYTES + 17, 2**32 - 1, rng.randrange(2**32)])
        flags = rng.choice([0, 1, 2, 255])
        conn._sock.sendall(length.to_bytes(4, "big") + bytes([flags]) + trap[: rng.randrange(len(trap) + 1)])
        _await_close(conn._sock)

    def flipped_bit(rng: random.Random) -> None:
        conn = connect(("127.0.0.1", port), secret)
        (record,) = _sealed(conn, "evil", booby)
        conn._sock.sendall(_flip(record, rng))
        _await_close(conn._sock)

    def tampered_last_record_of_a_long_message(rng: random.Random) -> None:
        """The first record (booby included) is authentic, the last is not: the message is never unpickled."""
        conn = connect(("127.0.0.1", port), secret)
        first, *rest = _sealed(conn, "evil", (booby, rng.randbytes(transport.RECORD_BYTES + 10)))
        conn._sock.sendall(first + b"".join(rest[:-1]) + _flip(rest[-1], rng))
        _await_close(conn._sock)

    def truncated_record(rng: random.Random) -> None:
        conn = connect(("127.0.0.1", port), secret)
        (record,) = _sealed(conn, "evil", booby)
        conn._sock.sendall(record[: rng.randrange(len(record))])
        _await_close(conn._sock)

    def record_of_another_connection(rng: random.Random) -> None:
        other = connect(("127.0.0.1", port), secret)
        (record,) = _sealed(other, "evil", booby)
        conn = connect(("127.0.0.1", port), secret)
        conn._sock.sendall(record)
        _await_close(conn._sock)
        other.close()

    return [
        before_handshake,
        wrong_secret,
        after_handshake_random,
        bad_length_or_flags,
        flipped_bit,
        tampered_last_record_of_a_long_message,
        truncated_record,
        record_of_another_connection,
    ]


def answer() -> int:
    return 42


@pytest.fixture()
def trap(tmp_path: Path) -> Iterator[tuple[Booby, bytes, Path]]:
    armed = tmp_path / "the-trap-works"
    pickle.loads(pickle.dumps(Booby(armed))).close()
    assert armed.exists()  # the oracle: unpickling a booby does leave a file
    path = tmp_path / "unpickled-something-unauthenticated"
    booby = Booby(path)
    yield booby, pickle.dumps(("evil", booby)), path
    assert not path.exists()


@pytest.mark.slow
def test_fuzzing_the_driver_channel_unpickles_nothing_and_a_rank_still_runs(trap: Any) -> None:
    booby, trapped, path = trap
    session = AttemptChannel(dumps_call(answer, (), {}), 1, "all", "127.0.0.1")
    placement = LocalPlacement(1, DirectLauncher())
    try:
        rng = random.Random(SEED)
        cases = fuzz_cases(session.port, session.secret, trapped, booby)
        for _ in range(CASES):
            rng.choice(cases)(rng)
        assert not path.exists(), "an unauthenticated pickle was loaded"
        placement.start(RankJob("fuzz-" + str(SEED), ("127.0.0.1", session.port), session.secret))
        with session.changed:
            assert session.changed.wait_for(session.report.all_done, 120), "the rank never reported"
        assert session.result_values([0]) == [42]
    finally:
        placement.stop()
        session.close()


class Recorder:
    def __init__(self) -> None:
        self.messages: list[tuple[str, Any]] = []
        self.disconnected = threading.Event()

    def on_message(self, conn: Connection, kind: str, data: Any) -> None:
        self.messages.append((kind, data))

    def on_disconnect(self, conn: Connection) -> None:
        self.disconnected.set()


@pytest.fixture()
def recorded() -> Iterator[tuple[ChannelServer, bytes, Recorder]]:
    secret = new_secret()
    recorder = Recorder()
    server = ChannelServer(secret, recorder.on_message, recorder.on_disconnect)
    yield server, secret, recorder
    server.close()


def test_a_replayed_record_is_refused(recorded: Any) -> None:
    server, secret, recorder = recorded
    conn = connect(("127.0.0.1", server.port), secret)
    (record,) = _sealed(conn, "once", 1)
    conn._sock.sendall(record + record)
    assert recorder.disconnected.wait(15)
    assert recorder.messages == [("once", 1)]


def test_reordered_records_are_refused(recorded: Any) -> None:
    server, secret, recorder = recorded
    conn = connect(("127.0.0.1", server.port), secret)
    (first,) = _sealed(conn, "first", 1)
    (second,) = _sealed(conn, "second", 2)
    conn._sock.sendall(second + first)
    assert recorder.disconnected.wait(15)
    assert recorder.messages == []


def test_a_record_reflected_to_its_sender_is_refused(recorded: Any) -> None:
    """Each direction has its own key: the server's record sent back to it does not authenticate."""
    server, secret, recorder = recorded
    conn = connect(("127.0.0.1", server.port), secret)
    conn.send("ready", 0)  # once the server has read it, the connection is among those it broadcasts to
    poll_until(lambda: recorder.messages, 15)
    conn._sock.settimeout(15)
    server.broadcast("from the server", 1)
    header = transport._recv_exact(conn._sock, 5)
    sealed = transport._recv_exact(conn._sock, int.from_bytes(header[:4], "big"))
    conn._sock.sendall(bytes(header) + bytes(sealed))
    assert recorder.disconnected.wait(15)
    assert recorder.messages == [("ready", 0)]
