"""The driver side of one run: the channel server, what each rank reported, and how it is shown."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkrunner.channel import ChannelServer, Connection, new_secret
from sparkrunner.channel.messages import Message
from sparkrunner.channel.payload import RemoteError, loads
from sparkrunner.driver.addresses import AddressBook
from sparkrunner.driver.output import RankOutput
from sparkrunner.driver.stacks import LiveRank, StackCollector, StackReport
from sparkrunner.errors import ChannelError, RankFailedError, SparkRunnerWarning
from sparkrunner.launch import processes

log = logging.getLogger(__name__)

MessageListener = Callable[[int, str, Any], None]
_ACTIVITY = (Message.OUTPUT, Message.OUTPUT_UPDATE, Message.LOG, Message.PROGRESS)


@dataclass
class RankState:
    connected_at: float | None = None
    host: str = ""
    done: bool = False
    gone: bool = False
    pid: int = 0
    task: int | None = None
    """The barrier task that started this rank (None on the driver, np < 0)."""
    failed_at: float | None = None


@dataclass
class RunReport:
    """Everything the ranks reported, guarded by one condition variable."""

    num_ranks: int
    ranks: dict[int, RankState] = field(default_factory=dict)
    results: dict[int, bytes] = field(default_factory=dict)
    """Pickled return values: rank 0's, or every rank's when all were asked for (`Runner.run_all`)."""
    errors: list[RankFailedError] = field(default_factory=list)
    vanished: list[int] = field(default_factory=list)
    output_ended: set[int] = field(default_factory=set)
    """Ranks whose output relay has sent everything and hung up."""
    task_reports: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Barrier task index -> `Message.TASK_REPORT` of a task that failed or whose ranks failed."""
    files: dict[str, str] = field(default_factory=dict)
    """Files ranks sent with `send_file_to_driver`: "rank N/name" -> where the driver saved it."""

    def all_connected(self) -> bool:
        return sum(1 for s in self.ranks.values() if s.connected_at is not None) == self.num_ranks

    def all_gone(self) -> bool:
        """True when every rank that connected has disconnected again."""
        return all(s.gone for s in self.ranks.values())

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
        self._listeners = list(listeners or [])
        self._conn_rank: dict[int, int] = {}
        # rank -> its live connection (not its output relay's, nor its barrier task's)
        self._rank_conns: dict[int, Connection] = {}
        self._relays: dict[int, int] = {}  # connection of a rank's output relay -> rank
        self._files_dir: str | None = None
        self.output = RankOutput(show=verbosity == "all")
        self.last_activity = time.monotonic()
        """When a rank last printed or reported progress (the stall watchdog reads it)."""
        self._stacks = StackCollector(self._ask_ranks_for_stacks)
        self._warned: set[str] = set()
        self._addresses = AddressBook()
        self._server = ChannelServer(self.secret, self._on_message, self._on_disconnect, bind_host, port)

    @property
    def port(self) -> int:
        return self._server.port

    def spark_task_ids(self) -> dict[int, int]:
        """Barrier task index -> Spark task id, for the tasks that joined the address exchange."""
        return self._addresses.spark_task_ids()

    def _on_message(self, conn: Connection, kind: str, data: Any) -> None:
        if kind == Message.HELLO:
            self._on_hello(conn, data)
            return
        if kind == Message.OUTPUT_STREAM:
            self._relays[id(conn)] = int(data["rank"])
            return
        if kind == Message.JOIN:
            self._addresses.join(conn, data)
            return
        if kind == Message.TASK_REPORT:
            with self.changed:
                self.report.task_reports[int(data["task"])] = data
                self.changed.notify_all()
            return
        rank = self._conn_rank.get(id(conn), self._relays.get(id(conn)))
        if rank is None:
            return
        if kind in _ACTIVITY:
            self.last_activity = time.monotonic()
        if kind == Message.OUTPUT:
            self.output.lines(rank, *data)
        elif kind == Message.OUTPUT_UPDATE:
            self.output.update(rank, *data)
        elif kind == Message.STACKS:
            self._stacks.on_reply(rank, data)
        elif kind == Message.LOG:
            self.output.logged(rank, str(data))
        elif kind == Message.WARNING:
            self._warn_once(str(data))
        elif kind in (Message.RESULT, Message.ERROR):
            self._on_outcome(conn, rank, kind, data)
        elif kind == Message.FILE:
            self._save_file(rank, data["name"], data["data"])
        for listener in self._listeners:
            listener(rank, kind, data)

    def _on_hello(self, conn: Connection, data: dict[str, Any]) -> None:
        rank = int(data["rank"])
        self._conn_rank[id(conn)] = rank
        self._rank_conns[rank] = conn
        with self.changed:
            task = data.get("task")
            state = RankState(time.monotonic(), str(data["host"]), pid=int(data["pid"]), task=task)
            self.report.ranks[rank] = state
            self.changed.notify_all()
        log.debug("rank %d connected from %s (pid %s)", rank, data["host"], data["pid"])
        conn.send(Message.PAYLOAD, self._payload)

    def _ask_ranks_for_stacks(self, request: Any) -> None:
        """Only rank connections answer `Message.DUMP_STACKS`: relays never read, and a task waiting in the
        address exchange expects nothing but `Message.TOPOLOGY`."""
        for conn in list(self._rank_conns.values()):
            with contextlib.suppress(ChannelError):
                conn.send(Message.DUMP_STACKS, request)

    def _warn_once(self, text: str) -> None:
        """Ranks on one host send the same warning: show each text once per run."""
        if text not in self._warned:
            self._warned.add(text)
            warnings.warn(text, SparkRunnerWarning, stacklevel=1)

    def _save_file(self, rank: int, name: str, data: bytes) -> None:
        """Save a file a rank sent under a per-run folder on the driver and say where it is."""
        if self._files_dir is None:
            self._files_dir = tempfile.mkdtemp(prefix="sparkrunner-files-")
        path = os.path.join(self._files_dir, f"rank{rank}-{os.path.basename(name)}")
        with open(path, "wb") as f:
            f.write(data)
        with self.changed:
            self.report.files[f"rank {rank}/{name}"] = path
        log.info("rank %d sent %s; saved on the driver as %s", rank, name, path)

    def _on_outcome(self, conn: Connection, rank: int, kind: str, data: Any) -> None:
        with self.changed:
            if kind == Message.ERROR:
                assert isinstance(data, RemoteError)
                self.report.errors.append(data.to_error(rank))
                self.report.ranks[rank].failed_at = time.monotonic()
            elif data is not None:
                self.report.results[rank] = data
            self.report.ranks[rank].done = True
            self.changed.notify_all()
        conn.send(Message.ACK)

    def _on_disconnect(self, conn: Connection) -> None:
        # forget the connection: a later one may get the same id()
        relay_of = self._relays.pop(id(conn), None)
        if relay_of is not None:
            with self.changed:
                self.report.output_ended.add(relay_of)
                self.changed.notify_all()
            return
        rank = self._conn_rank.pop(id(conn), None)
        if rank is None:
            return
        if self._rank_conns.get(rank) is conn:
            del self._rank_conns[rank]
        with self.changed:
            self.report.ranks[rank].gone = True
            if not self.report.ranks[rank].done:
                self.report.vanished.append(rank)
                self.report.ranks[rank].failed_at = time.monotonic()
            self.changed.notify_all()

    def result_value(self, rank: int = 0) -> Any:
        data = self.report.results.get(rank)
        return loads(data) if data is not None else None

    def collect_stacks(self) -> StackReport:
        """Every live rank's stacks now (bounded wait); ranks that never connected are listed as such."""
        with self.changed:
            states = dict(self.report.ranks)
        live = [LiveRank(r, s.host, s.pid) for r, s in states.items() if not s.done]
        missing = [r for r in range(self.report.num_ranks) if r not in states]
        return self._stacks.collect(live, missing, self.output.tail)

    def abort_ranks(self) -> None:
        """Tell every connected rank to kill itself and its children now."""
        self._server.broadcast(Message.ABORT)

    def stop_ranks(self, grace_s: float) -> None:
        """Ask every rank to stop (SIGTERM: `sparkrunner.stopping()` turns true), wait up to `grace_s` for
        them to leave, then abort whatever is left. A second Ctrl-C skips the rest of the grace period."""
        self._server.broadcast(Message.STOP)
        processes.kill_all(processes.stopped(self._ranks_on_this_machine()))  # no grace: they cannot act
        try:
            with self.changed:
                self.changed.wait_for(self.report.all_gone, grace_s)
        except KeyboardInterrupt:
            pass
        self.abort_ranks()

    def _ranks_on_this_machine(self) -> list[int]:
        """Pids of the live ranks that run on the driver (np < 0), the only pids that mean something here."""
        with self.changed:
            return [s.pid for s in self.report.ranks.values() if s.task is None and s.pid and not s.gone]

    def close(self) -> None:
        self._server.close()
