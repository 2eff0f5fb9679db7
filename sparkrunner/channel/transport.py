"""Encrypted, authenticated framed messages between the driver and its ranks over TCP.

Each connection starts with a mutual challenge-response on a shared secret (the per-run secret, or the task
agents' key); both sides then derive one AES-256-GCM key per direction from it and the two nonces. A message
is pickled and cut into records of at most `RECORD_BYTES`; each record is sealed with its direction's key and
a nonce made of its sequence number, its header (length, last-record flag) being authenticated too. A
replayed, reordered, truncated or altered record fails its tag and ends the connection. A message is
unpickled only once every one of its records was authenticated: nothing unauthenticated is ever unpickled.

The server spends no thread on a peer: one selector thread runs every handshake, at most
`MAX_PENDING_HANDSHAKES` at a time (the oldest is dropped for a new one), each for at most
`SERVER_HANDSHAKE_TIMEOUT_S`, and reads every authenticated connection without blocking; its complete
messages go to `HANDLER_THREADS` handler threads, a connection always to the same one, so that each
connection's messages are handled in order and a thousand ranks cost a bounded number of threads. A flood of
idle connections or a port scan costs it file descriptors for a few seconds, never the run; errors such as
running out of descriptors are survived and logged.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import pickle
import queue
import selectors
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from sparkrunner.errors import ChannelError
from sparkrunner.timeouts import (
    CONNECT_RETRY_PAUSE_S,
    HANDSHAKE_TIMEOUT_S,
    SELECT_TIMEOUT_S,
    SERVER_HANDSHAKE_TIMEOUT_S,
)

log = logging.getLogger(__name__)

_NONCE_BYTES = 32
_PROOF_BYTES = 32
_TAG_BYTES = 16
_RECORD_HEADER = struct.Struct("!IB")  # sealed length, flags
_LAST_RECORD = 1
RECORD_BYTES = 1 << 20
_MAX_MESSAGE = 1 << 34  # 16 GiB: results can be large model states
MAX_PENDING_HANDSHAKES = 128
HANDLER_THREADS = 4
"""Threads that run the server's handler, whatever the number of connections."""
_HANDLER_QUEUE = 256  # messages waiting per handler thread before the reader waits for it (backpressure)
_REFUSED = bytes(_PROOF_BYTES)  # what the server sends instead of its proof when the peer's proof is wrong


def new_secret() -> bytes:
    """A fresh random per-run secret."""
    return os.urandom(32)


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def pickled(kind: str, data: Any = None) -> memoryview:
    """A message's wire body, for `Connection.send_pickled`."""
    return memoryview(pickle.dumps((kind, data), protocol=pickle.HIGHEST_PROTOCOL))


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        count = sock.recv_into(view[got:], min(n - got, 1 << 20))
        if not count:
            raise ChannelError("connection closed by peer")
        got += count
    return buf


class _RecordCipher:
    """AES-GCM for one direction of one connection; the nonce is the record's sequence number."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self._seq = 0

    def _next_nonce(self) -> bytes:
        nonce = self._seq.to_bytes(12, "big")
        self._seq += 1
        return nonce

    def seal(self, chunk: bytes | memoryview, last: bool) -> bytes:
        header = _RECORD_HEADER.pack(len(chunk) + _TAG_BYTES, _LAST_RECORD if last else 0)
        return header + self._aead.encrypt(self._next_nonce(), chunk, header)

    def open(self, header: bytes, sealed: bytearray) -> bytes:
        try:
            return self._aead.decrypt(self._next_nonce(), sealed, header)
        except InvalidTag:
            raise ChannelError("a record failed authentication; dropping the connection") from None


def _direction_keys(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> tuple[bytes, bytes]:
    """(client-to-server key, server-to-client key) for one connection."""
    session = _mac(secret, b"session", server_nonce, client_nonce)
    return _mac(session, b"client to server"), _mac(session, b"server to client")


class Connection:
    """One authenticated, encrypted, bidirectional message stream. `send` is thread-safe; `recv` is for one
    reader."""

    def __init__(self, sock: socket.socket, keys: tuple[bytes, bytes], is_server: bool) -> None:
        self._sock = sock
        to_server, to_client = keys
        self._sender = _RecordCipher(to_client if is_server else to_server)
        self._receiver = _RecordCipher(to_server if is_server else to_client)
        self._send_lock = threading.Lock()
        self._inbox = bytearray()  # bytes read ahead by `read_ready`, not yet a whole record
        self._body = bytearray()  # the records of the message being read by `read_ready`
        self.closed = False

    def fileno(self) -> int:
        return self._sock.fileno()

    def local_host(self) -> str:
        """This end's address: the interface that reaches the peer (what a server here should advertise)."""
        return str(self._sock.getsockname()[0])

    def send(self, kind: str, data: Any = None) -> None:
        self.send_pickled(pickled(kind, data), kind)

    def send_pickled(self, body: memoryview, kind: str) -> None:
        """Send a message `pickled` once: the same message to many peers costs one pickling."""
        with self._send_lock:
            try:
                for start in range(0, max(len(body), 1), RECORD_BYTES):
                    chunk = body[start : start + RECORD_BYTES]
                    self._sock.sendall(self._sender.seal(chunk, last=start + RECORD_BYTES >= len(body)))
            except OSError as exc:
                raise ChannelError(f"could not send {kind!r}: {exc}") from exc

    def recv(self) -> tuple[str, Any]:
        """Block for the next message (one reader at a time)."""
        body = bytearray()
        last = False
        while not last:
            header = bytes(self._recv(_RECORD_HEADER.size))
            sealed_length, last = _record_header(header)
            self._open_into(body, header, self._recv(sealed_length))
        kind, data = pickle.loads(body)  # every record of `body` was authenticated
        return kind, data

    def read_ready(self) -> Iterator[tuple[str, Any]]:
        """Read what has arrived without blocking; yield the messages it completed (for a selector), then
        raise `ChannelError` if the connection ended or a record failed (after the good ones before it)."""
        try:
            chunk = self._sock.recv(RECORD_BYTES, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            raise ChannelError(f"connection broke: {exc}") from exc
        if not chunk:
            raise ChannelError("connection closed by peer")
        self._inbox += chunk
        start = 0
        try:
            while len(self._inbox) - start >= _RECORD_HEADER.size:
                header = bytes(self._inbox[start : start + _RECORD_HEADER.size])
                sealed_length, last = _record_header(header)
                end = start + _RECORD_HEADER.size + sealed_length
                if len(self._inbox) < end:
                    break
                self._open_into(self._body, header, self._inbox[start + _RECORD_HEADER.size : end])
                start = end
                if last:
                    body, self._body = self._body, bytearray()
                    yield pickle.loads(body)  # every record of it was authenticated
        finally:
            del self._inbox[:start]

    def _open_into(self, body: bytearray, header: bytes, sealed: bytearray) -> None:
        body += self._receiver.open(header, sealed)
        if len(body) > _MAX_MESSAGE:
            raise ChannelError(f"a message is larger than {_MAX_MESSAGE} bytes; dropping the connection")

    def _recv(self, n: int) -> bytearray:
        try:
            return _recv_exact(self._sock, n)
        except OSError as exc:
            raise ChannelError(f"connection broke: {exc}") from exc

    def shut_down(self) -> None:
        """End the connection both ways but keep its descriptor: a selector watching it sees it end."""
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.shut_down()
        self._sock.close()


def _record_header(header: bytes) -> tuple[int, bool]:
    """(sealed length, last record?) of a record's header; `ChannelError` when it cannot be one."""
    sealed_length, flags = _RECORD_HEADER.unpack(header)
    if not _TAG_BYTES <= sealed_length <= RECORD_BYTES + _TAG_BYTES or flags not in (0, _LAST_RECORD):
        raise ChannelError("a malformed record arrived; dropping the connection")
    return sealed_length, flags == _LAST_RECORD


def _ready(sock: socket.socket) -> socket.socket:
    sock.settimeout(None)
    if sock.family != socket.AF_UNIX:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def connect(address: tuple[str, int], secret: bytes, timeout: float = HANDSHAKE_TIMEOUT_S) -> Connection:
    """Open an authenticated connection to a `ChannelServer` (the rank side).

    A server busy with a flood may drop a handshake to make room: the client tries again until `timeout`.
    A server that fails to prove it knows the secret is refused at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _connect_once(address, secret, max(deadline - time.monotonic(), 0.1))
        except _HandshakeDropped as exc:
            if time.monotonic() >= deadline:
                raise ChannelError(
                    f"cannot reach the driver at {address[0]}:{address[1]} within {timeout} s: {exc.__cause__}"
                ) from exc
            time.sleep(CONNECT_RETRY_PAUSE_S)


class _HandshakeDropped(Exception):
    """The connection or handshake failed in a way that a retry may fix."""


def _connect_once(address: tuple[str, int], secret: bytes, timeout: float) -> Connection:
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except ConnectionRefusedError as exc:  # nobody listens: waiting will not help
        raise ChannelError(f"cannot reach the driver at {address[0]}:{address[1]}: {exc}") from exc
    except OSError as exc:
        raise _HandshakeDropped() from exc
    return client_handshake(sock, secret)


def client_handshake(sock: socket.socket, secret: bytes) -> Connection:
    """Prove to the server on the other end of the connected `sock` that we know `secret`, and check its proof
    (`ChannelError` when it fails; `_HandshakeDropped` when the connection broke meanwhile)."""
    try:
        server_nonce = bytes(_recv_exact(sock, _NONCE_BYTES))
        client_nonce = os.urandom(_NONCE_BYTES)
        sock.sendall(client_nonce + _mac(secret, b"client", server_nonce, client_nonce))
        proof = bytes(_recv_exact(sock, _PROOF_BYTES))
    except (OSError, ChannelError) as exc:
        sock.close()
        raise _HandshakeDropped() from exc
    if not hmac.compare_digest(proof, _mac(secret, b"server", client_nonce, server_nonce)):
        sock.close()
        if proof == _REFUSED:
            raise ChannelError("the server refused this secret (it belongs to another run or agent)")
        raise ChannelError("the driver failed authentication")
    return Connection(_ready(sock), _direction_keys(secret, server_nonce, client_nonce), is_server=False)


class _PendingHandshake:
    """A connected peer the server has sent its nonce to, and whose proof it is reading (non-blocking)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deadline = time.monotonic() + SERVER_HANDSHAKE_TIMEOUT_S
        self.nonce = os.urandom(_NONCE_BYTES)
        self.received = bytearray()
        sock.setblocking(False)
        if sock.send(self.nonce) != _NONCE_BYTES:  # a fresh socket's buffer always takes 32 bytes
            raise OSError("could not send the handshake nonce")

    def read(self) -> bool:
        """Read what arrived; True once the peer's nonce and proof are complete."""
        chunk = self.sock.recv(_NONCE_BYTES + _PROOF_BYTES - len(self.received))
        if not chunk:
            raise ChannelError("closed during the handshake")
        self.received += chunk
        return len(self.received) == _NONCE_BYTES + _PROOF_BYTES

    def finish(self, secret: bytes) -> Connection:
        """Check the peer's proof, prove ourselves, and return the connection (blocking from now on)."""
        client_nonce, proof = bytes(self.received[:_NONCE_BYTES]), bytes(self.received[_NONCE_BYTES:])
        if not hmac.compare_digest(proof, _mac(secret, b"client", self.nonce, client_nonce)):
            with contextlib.suppress(OSError):
                self.sock.send(_REFUSED)
            raise ChannelError("a peer connected with the wrong secret")
        if self.sock.send(_mac(secret, b"server", client_nonce, self.nonce)) != _PROOF_BYTES:
            raise OSError("could not send the handshake proof")
        keys = _direction_keys(secret, self.nonce, client_nonce)
        return Connection(_ready(self.sock), keys, is_server=True)


def server_handshake(sock: socket.socket, secret: bytes) -> Connection:
    """The server's side of the handshake on one accepted `sock`, blocking for at most
    `SERVER_HANDSHAKE_TIMEOUT_S` (a server that serves one peer at a time: a Unix socket's)."""
    try:
        pending = _PendingHandshake(sock)
        while True:
            if not readable(sock, pending.deadline - time.monotonic()):
                raise ChannelError("the peer did not prove it knows the secret in time")
            if pending.read():
                return pending.finish(secret)
    except OSError as exc:
        raise ChannelError(f"the handshake broke: {exc}") from exc


def readable(stream: Any, timeout: float) -> bool:
    """Wait up to `timeout` seconds until `stream` (a socket, a pipe, anything with a fileno) has something to
    read, or has ended; True when it has."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        return bool(selector.select(max(timeout, 0)))


Handler = Callable[[Connection, str, Any], None]


class ChannelServer:
    """Accepts authenticated connections and hands every message to `handler(conn, kind, data)`.

    `on_disconnect(conn)` is called when a connection ends (after its last message was handled), so the driver
    can notice ranks that vanish. One selector thread reads every connection; `HANDLER_THREADS` threads handle.
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
        self._listener.setblocking(False)
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._pending: OrderedDict[socket.socket, _PendingHandshake] = OrderedDict()
        self._connections: set[Connection] = set()
        self._handlers = [_HandlerThread(handler, on_disconnect, i) for i in range(HANDLER_THREADS)]
        self._lock = threading.Lock()
        self._closed = False
        self.rejected = 0
        """Connections dropped before they authenticated (wrong secret, timeout, flood, port scan)."""
        self._thread = threading.Thread(target=self._accept_loop, name="sparkrunner-channel", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def _accept_loop(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ)
        selector.register(self._wake_reader, selectors.EVENT_READ)
        try:
            while not self._closed:
                try:
                    self._step(selector)
                except Exception:  # the loop must outlive anything one peer or the OS throws at it
                    log.exception("the channel's accept loop hit an error; it keeps serving")
                    time.sleep(CONNECT_RETRY_PAUSE_S)
        finally:
            for pending in list(self._pending.values()):
                self._drop(selector, pending, None)
            selector.close()
            self._listener.close()
            self._wake_reader.close()

    def _step(self, selector: selectors.BaseSelector) -> None:
        for key, _ in selector.select(SELECT_TIMEOUT_S):
            if key.fileobj is self._listener:
                self._accept(selector)
            elif isinstance(key.data, Connection):
                self._read(selector, key.data)
            elif key.fileobj is not self._wake_reader:
                self._advance(selector, self._pending[key.fileobj])  # type: ignore[index]
        now = time.monotonic()
        for pending in [p for p in self._pending.values() if p.deadline < now]:
            self._drop(selector, pending, "did not authenticate in time")

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            sock, _ = self._listener.accept()
        except BlockingIOError:
            return
        except OSError as exc:  # out of file descriptors or memory: make room, pause, keep going
            log.warning("the channel could not accept a connection (%s); dropping the oldest handshake", exc)
            if self._pending:
                self._drop(selector, next(iter(self._pending.values())), None)
            time.sleep(CONNECT_RETRY_PAUSE_S)
            return
        if len(self._pending) >= MAX_PENDING_HANDSHAKES:
            self._drop(selector, next(iter(self._pending.values())), None)
        try:
            pending = _PendingHandshake(sock)
        except OSError:
            self.rejected += 1
            sock.close()
            return
        self._pending[sock] = pending
        selector.register(sock, selectors.EVENT_READ)

    def _advance(self, selector: selectors.BaseSelector, pending: _PendingHandshake) -> None:
        try:
            if not pending.read():
                return
            selector.unregister(pending.sock)
            del self._pending[pending.sock]
            conn = pending.finish(self._secret)
        except BlockingIOError:
            return
        except (OSError, ChannelError) as exc:
            self._drop(selector, pending, str(exc))
            return
        with self._lock:
            if self._closed:
                conn.close()
                return
            self._connections.add(conn)
        selector.register(conn, selectors.EVENT_READ, conn)

    def _drop(self, selector: selectors.BaseSelector, pending: _PendingHandshake, why: str | None) -> None:
        self.rejected += 1
        if why is not None:
            log.debug("rejected a connection to the channel: %s", why)
        if self._pending.pop(pending.sock, None) is not None:
            selector.unregister(pending.sock)
        pending.sock.close()

    def _read(self, selector: selectors.BaseSelector, conn: Connection) -> None:
        """Hand what `conn` completed to its handler thread; when it ended, its end too."""
        handler = self._handlers[hash(conn) % len(self._handlers)]
        try:
            for message in conn.read_ready():
                handler.put(conn, message)
        except Exception as exc:  # broken, closed, or not a message: the connection ends, the loop goes on
            log.debug("a channel connection ended: %s", exc)
            selector.unregister(conn)
            with self._lock:
                self._connections.discard(conn)
            handler.put(conn, None)  # closed there, after its last message was handled

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
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"x")
        if threading.current_thread() is not self._thread:
            self._thread.join()
        self._wake_writer.close()
        for conn in connections:
            conn.close()
        for handler in self._handlers:
            handler.stop()


class _HandlerThread:
    """Runs the server's handler for the connections assigned to it, in the order their messages arrived."""

    def __init__(self, handler: Handler, on_disconnect: Callable[[Connection], None], index: int) -> None:
        self._handler = handler
        self._on_disconnect = on_disconnect
        self._queue: queue.Queue[tuple[Connection, tuple[str, Any] | None] | None] = queue.Queue(
            _HANDLER_QUEUE
        )
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"sparkrunner-handler-{index}", daemon=True)
        self._thread.start()

    def put(self, conn: Connection, message: tuple[str, Any] | None) -> None:
        """Queue one message of `conn` (None: `conn` ended); waits while this thread is far behind."""
        self._queue.put((conn, message))

    def stop(self) -> None:
        """Handle nothing more (the server closed); never waits, even for a thread stuck in a handler."""
        self._stopped.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None and not self._stopped.is_set():
            conn, message = item
            if message is None:
                conn.close()
                self._on_disconnect(conn)
                continue
            try:
                self._handler(conn, *message)
            except ChannelError as exc:  # the handler refused the message: that ends its connection
                log.debug("a channel connection ended: %s", exc)
                conn.shut_down()
            except Exception:  # one peer's message must not end the server
                log.exception("the channel's handler failed on a message; closing that connection")
                conn.shut_down()


def connect_when_listening(address: tuple[str, int], secret: bytes, wait_s: float) -> Connection:
    """`connect`, retrying for up to `wait_s` seconds while the server is not listening yet."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return connect(address, secret)
        except ChannelError:
            if time.monotonic() > deadline:
                raise
            time.sleep(CONNECT_RETRY_PAUSE_S)
