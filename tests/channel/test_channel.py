"""The driver channel over real loopback sockets: authentication, integrity, nothing unauthenticated unpickled."""

from __future__ import annotations

import pickle
import socket
import threading
from typing import Any

import pytest

from sparkrunner.channel import ChannelServer, Connection, connect, new_secret
from sparkrunner.errors import ChannelError


class Recorder:
    def __init__(self) -> None:
        self.messages: list[tuple[str, Any]] = []
        self.disconnects = 0
        self.event = threading.Event()

    def on_message(self, conn: Connection, kind: str, data: Any) -> None:
        self.messages.append((kind, data))
        if kind == "ping":
            conn.send("pong", data)
        self.event.set()

    def on_disconnect(self, conn: Connection) -> None:
        self.disconnects += 1
        self.event.set()


@pytest.fixture()
def server() -> Any:
    secret = new_secret()
    rec = Recorder()
    srv = ChannelServer(secret, rec.on_message, rec.on_disconnect)
    yield srv, secret, rec
    srv.close()


def test_round_trip_with_the_right_secret(server: Any) -> None:
    srv, secret, rec = server
    conn = connect(("127.0.0.1", srv.port), secret)
    conn.send("ping", {"x": [1, 2, 3]})
    assert conn.recv() == ("pong", {"x": [1, 2, 3]})
    conn.close()
    assert rec.messages == [("ping", {"x": [1, 2, 3]})]


def test_wrong_secret_is_rejected_before_any_message(server: Any) -> None:
    srv, _, rec = server
    with pytest.raises(ChannelError):
        conn = connect(("127.0.0.1", srv.port), new_secret())
        conn.send("ping", 1)
        conn.recv()
    assert rec.messages == []


def test_client_refuses_a_server_without_the_secret() -> None:
    """A fake driver that does not know the secret cannot feed a rank a payload."""
    listener = socket.create_server(("127.0.0.1", 0))

    def fake_server() -> None:
        sock, _ = listener.accept()
        sock.sendall(b"n" * 32)
        sock.recv(64)
        sock.sendall(b"\1" * 32)  # a proof it cannot compute
        sock.close()

    threading.Thread(target=fake_server, daemon=True).start()
    with pytest.raises(ChannelError, match="driver failed authentication"):
        connect(("127.0.0.1", listener.getsockname()[1]), new_secret())
    listener.close()


UNPICKLED = threading.Event()


def _mark_unpickled() -> None:
    UNPICKLED.set()


class Exploding:
    """Unpickling this object would record that it happened."""

    def __reduce__(self) -> Any:
        return (_mark_unpickled, ())


def test_tampered_frame_is_dropped_without_unpickling(server: Any) -> None:
    srv, secret, rec = server
    conn = connect(("127.0.0.1", srv.port), secret)
    body = pickle.dumps(("evil", Exploding()))
    # a well-formed record (length, last-record flag) with a body in clear and a made-up tag
    conn._sock.sendall((len(body) + 16).to_bytes(4, "big") + b"\1" + body + b"\0" * 16)
    assert rec.event.wait(10)
    assert rec.disconnects == 1
    assert rec.messages == []
    assert not UNPICKLED.is_set()
    conn.close()
