"""The rank bootstrap (`python -m sparkrunner.worker`): fetch the payload, run it, report back.

The worker streams its own stdout/stderr (file descriptors 1 and 2, so C libraries are included) to the
driver line by line, and kills itself and its children when the driver says abort or disappears.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import sys
import threading
from typing import Any

import cloudpickle

from sparkrunner import channel, frameworks, handover, network, processes, rank
from sparkrunner.frameworks import horovod_env
from sparkrunner.payload import RemoteError, loads
from sparkrunner.protocol import Env, Message
from sparkrunner.topology import Topology

_ACK_TIMEOUT_S = 30.0


def _die(code: int) -> None:
    """Take this rank and everything it started down at once."""
    processes.kill_all(processes.descendants(os.getpid()))
    os._exit(code)


class OutputForwarder:
    """Redirects fds 1 and 2 into pipes and forwards each line to the driver (and optionally the old fd)."""

    def __init__(self, conn: channel.Connection, echo: bool) -> None:
        self._conn = conn
        self._echo = echo
        self._saved: dict[int, int] = {}
        self._threads: list[threading.Thread] = []
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, name in ((1, "stdout"), (2, "stderr")):
            self._saved[fd] = os.dup(fd)
            read_end, write_end = os.pipe()
            os.dup2(write_end, fd)
            os.close(write_end)
            thread = threading.Thread(target=self._pump, args=(read_end, name, self._saved[fd]), daemon=True)
            thread.start()
            self._threads.append(thread)
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True)

    def _pump(self, read_end: int, name: str, echo_fd: int) -> None:
        pending = b""
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                if self._echo:
                    with contextlib.suppress(OSError):
                        os.write(echo_fd, chunk)
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._send(name, line)
        if pending:
            self._send(name, pending)

    def _send(self, name: str, line: bytes) -> None:
        with contextlib.suppress(channel.ChannelError):
            self._conn.send(Message.OUTPUT, (name, line.decode("utf-8", "replace")))

    def stop(self) -> None:
        """Restore fds 1 and 2 and wait until every captured line has been sent."""
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        for fd, saved in self._saved.items():
            os.dup2(saved, fd)
        for thread in self._threads:
            # a child that inherited the pipe may keep it open; do not wait for it forever
            thread.join(timeout=2.0)


class DriverWatch:
    """Reads driver messages in the background: an abort or a lost driver ends this rank at once."""

    def __init__(self, conn: channel.Connection) -> None:
        self._conn = conn
        self.acknowledged = threading.Event()
        threading.Thread(target=self._watch, name="sparkrunner-driver-watch", daemon=True).start()

    def _watch(self) -> None:
        try:
            while True:
                kind, _ = self._conn.recv()
                if kind == Message.ACK:
                    self.acknowledged.set()
                    return
                if kind == Message.ABORT:
                    _die(1)
        except channel.ChannelError:
            if not self.acknowledged.is_set():
                _die(1)


def _load_call(payload: bytes) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    try:
        return loads(payload)
    except Exception as exc:
        raise RuntimeError(
            f"the training function could not be loaded on this rank ({type(exc).__name__}: {exc}). Functions "
            f"from your own modules are pickled by reference: make that module importable where the ranks run "
            f"(e.g. SparkContext.addPyFile), or define the function in the notebook or main script."
        ) from exc


def _outcome(payload: bytes, is_rank_zero: bool) -> tuple[str, Any]:
    try:
        main, args, kwargs = _load_call(payload)
    except RuntimeError as exc:
        return Message.ERROR, RemoteError.capture(exc)
    try:
        value = main(*args, **kwargs)
    except BaseException as exc:  # report everything, SystemExit and KeyboardInterrupt included
        return Message.ERROR, RemoteError.capture_user_error(exc)
    if not is_rank_zero:
        return Message.RESULT, None
    try:
        return Message.RESULT, cloudpickle.dumps(value)
    except Exception as exc:
        note = TypeError(f"rank 0's return value (a {type(value).__name__}) cannot be pickled: {exc}")
        return Message.ERROR, RemoteError.capture(note)


def _wire_frameworks_under_mpirun() -> None:
    """mpirun gives every rank the same environment: derive this rank's TF_CONFIG, torch variables, ..."""
    encoded = os.environ.get(Env.TOPOLOGY)
    if encoded:
        topology = Topology.from_json(encoded)
        me = rank.rank_context().rank
        os.environ.update(frameworks.mpi_rank_environment(topology, me))
        for name, value in network.socket_environment(topology.peers[me].host).items():
            os.environ.setdefault(name, value)  # an interface the user or the cluster chose wins


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: _die(143))
    rank.adopt_mpi_environment()
    _wire_frameworks_under_mpirun()
    me = rank.rank_context()
    host, port = os.environ[Env.DRIVER].rsplit(":", 1)
    secret = handover.take_run_secret(me.local_rank)
    conn = channel.connect((host, int(port)), secret)
    conn.send(Message.HELLO, {"rank": me.rank, "host": socket.gethostname(), "pid": os.getpid()})
    kind, payload = conn.recv()
    if kind != Message.PAYLOAD:
        return 1
    watch = DriverWatch(conn)
    rank.attach(conn)
    forwarder = OutputForwarder(conn, echo=os.environ.get(Env.ECHO_OUTPUT) == "1")
    try:
        kind, data = _outcome(payload, me.rank == 0)
        timeline = horovod_env.finish_timeline()
        if timeline is not None:
            rank.send_file_to_driver(timeline)
    finally:
        forwarder.stop()
    conn.send(kind, data)
    watch.acknowledged.wait(_ACK_TIMEOUT_S)
    rank.attach(None)
    conn.close()
    return 0 if kind == Message.RESULT else 1


if __name__ == "__main__":
    sys.exit(main())
