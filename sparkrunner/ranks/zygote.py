"""An executor's fork server (zygote): imports the run's heavy modules once, then forks each new rank from itself.

A retried or resized attempt then starts its ranks in a fraction of a second instead of importing torch again
(docs/elastic.md, "Resuming on warm processes"). Started by a barrier task (`tasks.zygote_client`) as
``python -m sparkrunner.ranks.zygote`` with the run's zygote key on stdin; it answers "ready" on stdout once it
listens on its Unix socket. Each connection (authenticated with the key, like the driver channel) asks for one
rank (`Fork`, with the task's output pipe passed as SCM_RIGHTS); the zygote forks it, answers `Forked`, and
sends `Exit` when the rank ends, so the task waits for, echoes and attributes its rank as before. A task that
hangs up first takes its rank down with it.

Before forking the zygote runs no torch op and starts no Python thread (a fork copies one thread only). It ends with
the driver's lease (the run ended, or the driver is gone), with the executor's Python daemon, or after
`ZYGOTE_IDLE_S` with no connection; its environment carries the run's id, as every process of a run does. Its temp
dir is a folder of its own, removed when it ends (a forked rank takes back its task's), and the sockets' folder goes
with the last zygote's socket: nothing of it stays in the executor's temp dir.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import selectors
import socket
import sys
import tempfile
import time
import traceback

from sparkrunner.channel import messages as m
from sparkrunner.channel.transport import Connection, client_handshake, server_handshake
from sparkrunner.common.environment import Env
from sparkrunner.errors import ChannelError
from sparkrunner.ranks.zygote_imports import fork_hazard, fork_state, preload
from sparkrunner.system import processes
from sparkrunner.system.forked_rank import become_rank
from sparkrunner.system.temp_folder import WatchedFolder
from sparkrunner.system.zygote_link import (
    is_abstract,
    made_in_sockets_folder,
    remove_sockets_folder,
    socket_address,
)
from sparkrunner.timeouts import (
    HANDSHAKE_TIMEOUT_S,
    SERVER_HANDSHAKE_TIMEOUT_S,
    ZYGOTE_IDLE_S,
    ZYGOTE_POLL_S,
    ZYGOTE_WARM_AFTER_S,
)

log = logging.getLogger(__name__)
"""No handler here, so that forked ranks inherit none: Python's last-resort handler writes warnings to stderr, the
starting task's, which the executor log keeps."""

KEY_BYTES = 32


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def _modules(variable: str) -> list[str]:
    return [name for name in os.environ.get(variable, "").split(",") if name]


class Zygote:
    """The serving loop: one selector over the listener, the lease and each rank's task connection."""

    def __init__(
        self, listener: socket.socket, lease: socket.socket, key: bytes, watched: str, warm: list[str]
    ) -> None:
        self._listener, self._lease, self._key = listener, lease, key
        self._watched, self._warm = watched, warm
        self._forks = True
        self._ranks: dict[int, tuple[socket.socket, Connection]] = {}  # pid -> its task's connection
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._selector.register(lease, selectors.EVENT_READ, "lease")
        self._idle_since = self._last_request = time.monotonic()

    def serve(self) -> None:
        while self._executor_alive() and not self._idle_too_long():
            events = self._selector.select(ZYGOTE_POLL_S)
            for key, _ in events:
                if key.data == "lease":
                    return  # the driver hung up: the run ended (or the driver is gone)
                if key.data == "accept":
                    self._last_request = time.monotonic()
                    self._accept()
                else:
                    processes.kill_tree(key.data)  # its task hung up first: the rank goes with it
            self._reap()
            if not events:
                self._warm_up()

    def _warm_up(self) -> None:
        """Once idle for ZYGOTE_WARM_AFTER_S after its last fork, import the modules ranks load on first use
        (once), while the ranks it forked run: a retry after their failure then forks at once. If that started a
        thread, Python's or a native one (a library's pool or background thread), opened a socket or initialised
        CUDA (`zygote_imports.fork_hazard`), a fork would hand a rank a broken copy: the zygote forks no more (the
        ranks it forked run on, later ones start cold)."""
        if not self._warm or time.monotonic() - self._last_request < ZYGOTE_WARM_AFTER_S:
            return
        before = fork_state()
        preload(self._warm)
        self._warm = []
        hazard = fork_hazard(before)
        if hazard is not None:
            log.warning("sparkrunner's zygote forks no more ranks (%s): they start cold", hazard)
            self._forks = False

    def close(self) -> None:
        """Take down any rank still running, and stop listening."""
        for pid in list(self._ranks):
            processes.kill_tree(pid)
        self._reap()
        path = self._listener.getsockname()
        self._listener.close()
        if not isinstance(path, str):  # (bytes: an abstract socket, the driver's zygote's: no file to remove)
            return
        for leftover in (
            path,
            path + m.ZYGOTE_LOCK_SUFFIX,
        ):  # the run is over here: no task waits on the lock
            with contextlib.suppress(OSError):
                os.unlink(leftover)
        remove_sockets_folder(path)

    def _executor_alive(self) -> bool:
        pid, ticks = self._watched.split(":")
        stat = processes.proc_stat(pid)
        return stat is not None and stat.start_ticks == int(ticks) and stat.state != "Z"

    def _idle_too_long(self) -> bool:
        if self._ranks:
            self._idle_since = time.monotonic()
        return time.monotonic() - self._idle_since > ZYGOTE_IDLE_S

    def _accept(self) -> None:
        sock, _ = self._listener.accept()
        if not self._forks:  # its task sees the connection end, and starts its rank cold
            sock.close()
            return
        try:
            conn = server_handshake(sock, self._key)
            sock.settimeout(SERVER_HANDSHAKE_TIMEOUT_S)  # an authenticated peer still may not hold us up
            request = m.receive(conn)
            _, fds, _, _ = socket.recv_fds(sock, 1, 1)
            sock.settimeout(None)
        except (ChannelError, OSError) as exc:
            log.warning("sparkrunner's zygote dropped a request: %s", exc)
            sock.close()
            return
        if not isinstance(request, m.Fork) or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            sock.close()
            return
        try:
            pid = self._fork(request, fds[0], sock)
        except OSError as exc:  # (no memory for a fork): this task's rank starts cold, the others run on
            log.warning("sparkrunner's zygote could not fork a rank: %s", exc)
            sock.close()
            return
        finally:
            os.close(fds[0])
        self._ranks[pid] = (sock, conn)
        self._selector.register(sock, selectors.EVENT_READ, pid)
        with contextlib.suppress(ChannelError):
            m.send(conn, m.Forked(pid))

    def _fork(self, request: m.Fork, output: int, task: socket.socket) -> int:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        # the rank's garbage collections skip what it inherits: a full one (accelerate's free_memory, the Hugging Face
        # Trainer's end) walked the 0.5 M objects of torch, transformers and DeepSpeed in 0.3 s and wrote to each
        # one's header, copying the pages the fork shares (Python's gc.freeze documentation); the zygote's own
        # collections go on as before
        gc.freeze()
        pid = os.fork()
        if pid != 0:
            gc.unfreeze()
            return pid
        code = 70
        try:
            task.close()
            self._forget_in_child()
            code = become_rank(request, output)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)

    def _forget_in_child(self) -> None:
        """Drop the zygote's sockets from this (forked) process without shutting them down for the zygote."""
        self._selector.close()
        for sock, _ in self._ranks.values():
            sock.close()
        self._listener.close()
        self._lease.close()

    def _reap(self) -> None:
        for pid in list(self._ranks):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                sock, conn = self._ranks.pop(pid)
                self._selector.unregister(sock)
                with contextlib.suppress(ChannelError):
                    m.send(conn, m.Exit(os.waitstatus_to_exitcode(status), ""))
                conn.close()


def _listen(path: str) -> socket.socket:
    if is_abstract(path):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(socket_address(path))
        listener.listen(64)
        return listener
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a zygote of this run that ended (the starting task holds the lock)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    made_in_sockets_folder(path, lambda p: _bind_for_owner(listener, p))
    listener.listen(64)
    return listener


def _bind_for_owner(listener: socket.socket, path: str) -> None:
    """Bind `listener` to `path` as a socket only this user may connect to (the umask holds while binding only: a
    folder made meanwhile would be unusable)."""
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)


def main() -> int:
    """Serve in a temp folder of the zygote's own, which goes with it (and which its forked ranks leave). The
    driver's zygote serves in the driver's temp dir, where its ranks would start cold: it leaves nothing there
    (its socket is abstract), and what its imports write is what a cold rank's would."""
    _quiet_allocators()
    if Env.DRIVER_ZYGOTE in os.environ:
        return _serve()
    with WatchedFolder("sparkrunner-zygote-") as temp:
        _use_temp_dir(temp.path)
        return _serve()


def _quiet_stdout() -> int:
    """Point stdout at /dev/null before any import (DeepSpeed's logger prints its accelerator's choice there), and
    return a copy of the starting task's pipe, where only the "ready" line goes."""
    ready = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    return ready


def _quiet_allocators() -> None:
    """pyarrow's jemalloc starts a background thread when pyarrow is imported (its default pool is another
    allocator): a fork would copy it half. Off in the zygote, before any import (a forked rank keeps it off: jemalloc
    read its settings once, here)."""
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "background_thread:false")


def _use_temp_dir(path: str) -> None:
    """Make `path` the temp dir of the zygote and of what it imports (torch._dynamo makes torch's inductor cache
    folder there), before any import: none of it then stays in the executor's temp dir."""
    os.environ["TMPDIR"] = path
    tempfile.tempdir = path


def _serve() -> int:
    key = sys.stdin.buffer.read(KEY_BYTES)
    ready = _quiet_stdout()
    before = fork_state()
    preload(["sparkrunner.ranks.bootstrap", *_modules(Env.ZYGOTE_MODULES)])
    hazard = fork_hazard(before, native_threads=False)
    if len(key) != KEY_BYTES or hazard is not None:
        log.warning("sparkrunner's zygote is not serving (%s): the ranks start cold", hazard or "no key")
        return 1
    lease = socket.create_connection(_address(os.environ[Env.ZYGOTE_LEASE]), timeout=HANDSHAKE_TIMEOUT_S)
    client_handshake(lease, key)
    zygote = Zygote(
        _listen(os.environ[Env.ZYGOTE_SOCKET]),
        lease,
        key,
        os.environ[Env.ZYGOTE_WATCH],
        _modules(Env.ZYGOTE_WARM),
    )
    os.write(ready, m.ZYGOTE_READY)
    os.close(ready)  # the starting task stops reading
    try:
        zygote.serve()
    finally:
        zygote.close()
    return 0


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # with its clean-up done: no module teardown (seconds with torch loaded) holds its end up
