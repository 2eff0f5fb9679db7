"""The driver side of one run: the channel server, what each rank reported, and how it is shown."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkrunner.channel import ChannelServer, Connection, new_secret
from sparkrunner.errors import RankFailedError
from sparkrunner.payload import RemoteError, loads
from sparkrunner.protocol import Message

log = logging.getLogger("sparkrunner")

VERBOSITIES = ("all", "log_callback_only")
MessageListener = Callable[[int, str, Any], None]


@dataclass
class RankState:
    connected_at: float | None = None
    host: str = ""
    done: bool = False


@dataclass
class RunReport:
    """Everything the ranks reported, guarded by one condition variable."""

    num_ranks: int
    ranks: dict[int, RankState] = field(default_factory=dict)
    result: bytes | None = None
    errors: list[RankFailedError] = field(default_factory=list)
    vanished: list[int] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    """Files ranks sent with `send_file_to_driver`: "rank N/name" -> where the driver saved it."""

    def all_connected(self) -> bool:
        return sum(1 for s in self.ranks.values() if s.connected_at is not None) == self.num_ranks

    def all_done(self) -> bool:
        return sum(1 for s in self.ranks.values() if s.done) == self.num_ranks


class DriverSession:
    """Serves the payload to ranks and collects their output, results and errors."""

    def __init__(
        self,
        payload: bytes,
        num_ranks: int,
        verbosity: str,
        bind_host: str,
        listeners: list[MessageListener] | None = None,
        port: int = 0,
    ) -> None:
        self.secret = new_secret()
        self.report = RunReport(num_ranks)
        self.changed = threading.Condition()
        self._payload = payload
        self._verbosity = verbosity
        self._listeners = list(listeners or [])
        self._conn_rank: dict[int, int] = {}
        self._files_dir: str | None = None
        self._server = ChannelServer(self.secret, self._on_message, self._on_disconnect, bind_host, port)

    @property
    def port(self) -> int:
        return self._server.port

    def _on_message(self, conn: Connection, kind: str, data: Any) -> None:
        if kind == Message.HELLO:
            self._on_hello(conn, data)
            return
        rank = self._conn_rank.get(id(conn))
        if rank is None:
            return
        if kind == Message.OUTPUT:
            self._show_output(rank, *data)
        elif kind == Message.LOG:
            print(f"[rank {rank}] {data}", flush=True)
        elif kind in (Message.RESULT, Message.ERROR):
            self._on_outcome(conn, rank, kind, data)
        elif kind == Message.FILE:
            self._save_file(rank, data["name"], data["data"])
        for listener in self._listeners:
            listener(rank, kind, data)

    def _on_hello(self, conn: Connection, data: dict[str, Any]) -> None:
        rank = int(data["rank"])
        self._conn_rank[id(conn)] = rank
        with self.changed:
            self.report.ranks[rank] = RankState(connected_at=time.monotonic(), host=str(data["host"]))
            self.changed.notify_all()
        log.debug("rank %d connected from %s (pid %s)", rank, data["host"], data["pid"])
        conn.send(Message.PAYLOAD, self._payload)

    def _show_output(self, rank: int, stream: str, line: str) -> None:
        if self._verbosity != "all":
            return
        out = sys.stderr if stream == "stderr" else sys.stdout
        print(f"[rank {rank}] {line}", file=out, flush=True)

    def _save_file(self, rank: int, name: str, data: bytes) -> None:
        """Save a file a rank sent under a per-run folder on the driver and say where it is."""
        if self._files_dir is None:
            self._files_dir = tempfile.mkdtemp(prefix="sparkrunner-files-")
        path = os.path.join(self._files_dir, f"rank{rank}-{os.path.basename(name)}")
        with open(path, "wb") as f:
            f.write(data)
        with self.changed:
            self.report.files[f"rank {rank}/{name}"] = path
        print(f"[sparkrunner] rank {rank} sent {name}; saved on the driver as {path}", flush=True)

    def _on_outcome(self, conn: Connection, rank: int, kind: str, data: Any) -> None:
        with self.changed:
            if kind == Message.ERROR:
                assert isinstance(data, RemoteError)
                self.report.errors.append(data.to_error(rank))
            elif rank == 0:
                self.report.result = data
            self.report.ranks[rank].done = True
            self.changed.notify_all()
        conn.send(Message.ACK)

    def _on_disconnect(self, conn: Connection) -> None:
        rank = self._conn_rank.get(id(conn))
        if rank is None:
            return
        with self.changed:
            if not self.report.ranks[rank].done:
                self.report.vanished.append(rank)
            self.changed.notify_all()

    def result_value(self) -> Any:
        return loads(self.report.result) if self.report.result is not None else None

    def abort_ranks(self) -> None:
        """Tell every connected rank to kill itself and its children now."""
        self._server.broadcast(Message.ABORT)

    def close(self) -> None:
        self._server.close()
