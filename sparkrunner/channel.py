"""Authenticated framed messages between the driver and its ranks over TCP.

Each connection starts with a mutual challenge-response on the per-run secret; every later frame carries an
HMAC-SHA256 over (direction, sequence number, body), keyed by a per-connection session key. A frame is
unpickled only after its MAC checks out, so nothing unauthenticated is ever unpickled.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import pickle
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from sparkrunner.errors import ChannelError

log = logging.getLogger(__name__)

_NONCE_BYTES = 32
_MAC_BYTES = 32
_HEADER = struct.Struct("!Q")
_MAX_FRAME = 1 << 34  # 16 GiB: results can be large model states
HANDSHAKE_TIMEOUT_S = 20.0


def new_secret() -> bytes:
    """A fresh random per-run secret."""
    return os.urandom(32)


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(min(n - len(chunks), 1 << 20))
        if not chunk:
            raise ChannelError("connection closed by peer")
        chunks += chunk
    return bytes(chunks)


class Connection:
    """One authenticated, bidirectional message stream. `send` is thread-safe; `recv` is for one reader."""

    def __init__(self, sock: socket.socket, session_key: bytes, is_server: bool) -> None:
        self._sock = sock
        self._key = session_key
        self._out_dir, self._in_dir = (b"S", b"C") if is_server else (b"C", b"S")
        self._out_seq = 0
        self._in_seq = 0
        self._send_lock = threading.Lock()
        self.closed = False

    def send(self, kind: str, data: Any = None) -> None:
        body = pickle.dumps((kind, data), protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            mac = _mac(self._key, self._out_dir, _HEADER.pack(self._out_seq), body)
            self._out_seq += 1
            try:
                self._sock.sendall(_HEADER.pack(len(body)) + mac + body)
            except OSError as exc:
                raise ChannelError(f"could not send {kind!r}: {exc}") from exc

    def recv(self) -> tuple[str, Any]:
        try:
            (length,) = _HEADER.unpack(_recv_exact(self._sock, _HEADER.size))
            if length > _MAX_FRAME:
                raise ChannelError(f"frame of {length} bytes is larger than allowed")
            mac = _recv_exact(self._sock, _MAC_BYTES)
            body = _recv_exact(self._sock, length)
        except OSError as exc:
            raise ChannelError(f"connection broke: {exc}") from exc
        expected = _mac(self._key, self._in_dir, _HEADER.pack(self._in_seq), body)
        if not hmac.compare_digest(mac, expected):
            raise ChannelError("a frame failed authentication; dropping the connection")
        self._in_seq += 1
        kind, data = pickle.loads(body)
        return kind, data

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


def _server_handshake(sock: socket.socket, secret: bytes) -> Connection:
    server_nonce = os.urandom(_NONCE_BYTES)
    sock.sendall(server_nonce)
    client_nonce = _recv_exact(sock, _NONCE_BYTES)
    proof = _recv_exact(sock, _MAC_BYTES)
    if not hmac.compare_digest(proof, _mac(secret, b"client", server_nonce, client_nonce)):
        raise ChannelError("a peer connected with the wrong secret")
    sock.sendall(_mac(secret, b"server", client_nonce, server_nonce))
    return Connection(sock, _mac(secret, b"session", server_nonce, client_nonce), is_server=True)


def connect(address: tuple[str, int], secret: bytes, timeout: float = HANDSHAKE_TIMEOUT_S) -> Connection:
    """Open an authenticated connection to a `ChannelServer` (the rank side)."""
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except OSError as exc:
        raise ChannelError(f"cannot reach the driver at {address[0]}:{address[1]}: {exc}") from exc
    try:
        server_nonce = _recv_exact(sock, _NONCE_BYTES)
        client_nonce = os.urandom(_NONCE_BYTES)
        sock.sendall(client_nonce + _mac(secret, b"client", server_nonce, client_nonce))
        proof = _recv_exact(sock, _MAC_BYTES)
        if not hmac.compare_digest(proof, _mac(secret, b"server", client_nonce, server_nonce)):
            raise ChannelError("the driver failed authentication")
    except (OSError, ChannelError):
        sock.close()
        raise
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return Connection(sock, _mac(secret, b"session", server_nonce, client_nonce), is_server=False)


Handler = Callable[[Connection, str, Any], None]


class ChannelServer:
    """Accepts authenticated connections and hands every message to `handler(conn, kind, data)`.

    `on_disconnect(conn)` is called when a connection ends, so the driver can notice ranks that vanish.
    """

    def __init__(
        self,
        secret: bytes,
        handler: Handler,
        on_disconnect: Callable[[Connection], None],
        bind_host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._secret = secret
        self._handler = handler
        self._on_disconnect = on_disconnect
        self._listener = socket.create_server((bind_host, port), backlog=128)
        self._connections: list[Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept_loop, name="sparkrunner-channel", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            conn = _server_handshake(sock, self._secret)
        except (OSError, ChannelError) as exc:
            log.warning("rejected a connection to the driver channel: %s", exc)
            sock.close()
            return
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            if self._closed:
                conn.close()
                return
            self._connections.append(conn)
        try:
            while True:
                kind, data = conn.recv()
                self._handler(conn, kind, data)
        except ChannelError:
            pass
        finally:
            conn.close()
            self._on_disconnect(conn)

    def broadcast(self, kind: str, data: Any = None) -> None:
        """Send a message to every connected peer, ignoring peers that are already gone."""
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(ChannelError):
                conn.send(kind, data)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        self._listener.close()
        for conn in connections:
            conn.close()


def connect_when_listening(address: tuple[str, int], secret: bytes, wait_s: float) -> Connection:
    """`connect`, retrying for up to `wait_s` seconds while the server is not listening yet."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return connect(address, secret)
        except ChannelError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
