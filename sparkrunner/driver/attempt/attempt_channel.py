"""The driver side of one attempt of a run: its channel server, what each rank reported, and how it is shown
(`AttemptChannel`; a run has one per attempt, a warm session one per run on its long-lived ranks)."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from sparkrunner.channel import ChannelServer, Connection, new_secret
from sparkrunner.channel import messages as m
from sparkrunner.channel.payload import loads, pickled_type_name
from sparkrunner.driver.attempt.addresses import AddressBook
from sparkrunner.driver.attempt.barrier_gate import BarrierGate
from sparkrunner.driver.attempt.output import RankOutput
from sparkrunner.driver.attempt.registry import RankRegistry
from sparkrunner.driver.attempt.stacks import LiveRank, StackCollector, StackReport
from sparkrunner.errors import ChannelError, RankFailedError, ResultNotUnpicklableError, SparkRunnerWarning
from sparkrunner.observe.events import AnatomyEvent, LaunchEvent, ProgressEvent
from sparkrunner.observe.observers import RunObserver
from sparkrunner.system import processes
from sparkrunner.timeouts import FAILURE_POLL_S

log = logging.getLogger(__name__)

_ACTIVITY = (m.Output, m.OutputUpdate, m.Log, m.Progress)


class AttemptChannel:
    """Serves the payload to ranks and collects their output, results and errors."""

    def __init__(
        self,
        payload: bytes,
        num_ranks: int,
        verbosity: str,
        bind_host: str,
        observer: RunObserver | None = None,
        port: int = 0,
    ) -> None:
        self.secret = new_secret()
        self.report = RankRegistry(num_ranks)
        self.changed = threading.Condition()
        self._payload = payload
        self._observer = observer or RunObserver()
        self._conn_rank: dict[int, int] = {}
        # rank -> its live connection (not its output relay's, nor its barrier task's)
        self._rank_conns: dict[int, Connection] = {}
        self._relays: dict[int, int] = {}  # connection of a rank's output relay -> rank
        self._run_over_waiters: dict[int, Connection] = {}  # barrier tasks that asked to hear `RunOver`
        self._files_dir: str | None = None
        self.output = RankOutput(show=verbosity == "all")
        self.last_activity = time.monotonic()
        """When a rank last printed or reported progress (the stall watchdog reads it)."""
        self.stop_requested: str | None = None
        """Why the caller asked the attempt to stop (`request_stop`); the run's controller acts on it."""
        self._stacks = StackCollector(self._ask_ranks_for_stacks)
        self._warned: set[str] = set()
        self._addresses = AddressBook()
        self._barrier = BarrierGate(num_ranks)
        self._server = ChannelServer(
            self.secret, m.serving(self._on_message), self._on_disconnect, bind_host, port
        )

    @property
    def port(self) -> int:
        return self._server.port

    def spark_task_ids(self) -> dict[int, int]:
        """Barrier task index -> Spark task id, for the tasks that joined the address exchange."""
        return self._addresses.spark_task_ids()

    def _on_message(self, conn: Connection, message: m.Message) -> None:
        match message:
            case m.Hello():
                self._on_hello(conn, message)
            case m.OutputStream():
                self._relays[id(conn)] = message.rank
            case m.Join():
                self._addresses.join(conn, message)
                with self.changed:
                    self.changed.notify_all()  # `spark_task_ids()` changed
            case m.Wait():
                self._wait_for_run_over(conn)
            case m.TaskReport(task=task):
                with self.changed:
                    self.report.task_reports[task] = message
                    self.changed.notify_all()
            case _:
                rank = self._conn_rank.get(id(conn), self._relays.get(id(conn)))
                if rank is not None:
                    self._from_rank(conn, rank, message)

    def _from_rank(self, conn: Connection, rank: int, message: m.Message) -> None:
        """A message from a rank's own connection or its output relay."""
        if isinstance(message, _ACTIVITY):
            self.last_activity = time.monotonic()
        match message:
            case m.Output(stream=stream, lines=lines):
                self.output.lines(rank, stream, lines)
                self._observer.on_rank_output(rank, stream, lines)
            case m.OutputUpdate(stream=stream, text=text):
                self.output.update(rank, stream, text)
            case m.Stacks():
                self._stacks.on_reply(rank, message)
            case m.Log(text=text):
                self.output.logged(rank, text)
                self._observer.on_rank_log(rank, text)
            case m.RankWarning(text=text):
                self._warn_once(text)
            case m.Progress():
                self._observer.on_progress(rank, ProgressEvent.of(message))
            case m.StepAnatomy():
                self._observer.on_anatomy(rank, AnatomyEvent.of(message))
            case m.BarrierJoin():
                self._barrier.join(conn, rank, message)
            case m.GraceWanted():
                with self.changed:
                    self.report.ranks[rank].wants_grace = True
                    self.changed.notify_all()
            case m.Result() | m.Error():
                self._on_outcome(conn, rank, message)
            case m.File(name=name, data=data):
                self._observer.on_file(rank, name, self._save_file(rank, name, data))
            case _:
                raise ChannelError(
                    f"rank {rank} sent a {message.kind!r} message, which only the driver sends"
                )

    def _on_hello(self, conn: Connection, hello: m.Hello) -> None:
        self._conn_rank[id(conn)] = hello.rank
        self._rank_conns[hello.rank] = conn
        with self.changed:
            self.report.connected(hello)
            self.changed.notify_all()
        log.debug("rank %d connected from %s (pid %s)", hello.rank, hello.host, hello.pid)
        if hello.launch is not None:
            self._observer.on_rank_launch(hello.rank, LaunchEvent.of(hello.launch))
        self._observer.on_rank_start(hello.rank)
        m.send(conn, m.Payload(self._payload))

    def _ask_ranks_for_stacks(self, request: int) -> None:
        """Only rank connections answer `DumpStacks`: relays never read, and a task waiting in the address
        exchange expects nothing but `Topology`."""
        for conn in list(self._rank_conns.values()):
            with contextlib.suppress(ChannelError):
                m.send(conn, m.DumpStacks(request))

    def _warn_once(self, text: str) -> None:
        """Ranks on one host send the same warning: show each text once per run."""
        if text not in self._warned:
            self._warned.add(text)
            warnings.warn(text, SparkRunnerWarning, stacklevel=1)

    def _save_file(self, rank: int, name: str, data: bytes) -> str:
        """Save a file a rank sent under a per-run folder on the driver and say where it is."""
        if self._files_dir is None:
            self._files_dir = tempfile.mkdtemp(prefix="sparkrunner-files-")
        path = os.path.join(self._files_dir, f"rank{rank}-{os.path.basename(name)}")
        with open(path, "wb") as f:
            f.write(data)
        with self.changed:
            self.report.files[f"rank {rank}/{name}"] = path
        log.info("rank %d sent %s; saved on the driver as %s", rank, name, path)
        return path

    def _on_outcome(self, conn: Connection, rank: int, outcome: m.Result | m.Error) -> None:
        ended = outcome.error.to_error(rank) if isinstance(outcome, m.Error) else outcome
        with self.changed:
            self.report.reported(rank, ended)
            self.changed.notify_all()
        self._observer.on_rank_exit(rank, ended if isinstance(ended, RankFailedError) else None)
        m.send(conn, m.Ack())

    def _wait_for_run_over(self, conn: Connection) -> None:
        """A barrier task (task 0 of an mpirun run) asks to hear when every rank reported and hung up."""
        with self.changed:
            self._run_over_waiters[id(conn)] = conn
            over = self.report.over()
        if over:
            m.send_to_all([conn], m.RunOver())

    def _on_disconnect(self, conn: Connection) -> None:
        # forget the connection: a later one may get the same id()
        self._run_over_waiters.pop(id(conn), None)
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
            self.report.disconnected(rank)
            self.changed.notify_all()
            told = list(self._run_over_waiters.values()) if self.report.over() else []
            vanished = rank in self.report.vanished
        if vanished:
            log.debug("rank %d hung up without reporting a result", rank)
        m.send_to_all(told, m.RunOver())  # what still runs is no rank's: mpirun held up by a daemon

    def result_values(self, ranks: Iterable[int]) -> list[Any]:
        """The values `ranks` returned; one the driver cannot unpickle raises `ResultNotUnpicklableError`."""
        values = []
        for rank in ranks:
            data = self.report.results.get(rank)
            try:
                values.append(loads(data) if data is not None else None)
            except Exception as exc:
                raise ResultNotUnpicklableError(rank, pickled_type_name(data or b""), exc) from exc
        return values

    def collect_stacks(self) -> StackReport:
        """Every live rank's stacks now (bounded wait); ranks that never connected are listed as such."""
        with self.changed:
            states = dict(self.report.ranks)
        live = [LiveRank(r, s.host, s.pid) for r, s in states.items() if not s.done]
        missing = [r for r in range(self.report.num_ranks) if r not in states]
        return self._stacks.collect(live, missing, self.output.tail)

    def abort_ranks(self) -> None:
        """Tell every connected rank to kill itself and its children now."""
        self._server.broadcast(*m.encode(m.Abort()))

    def request_stop(self, reason: str) -> None:
        """Note, from any thread, that the caller asks the attempt to stop; wakes the run's controller, which asks
        the ranks (once, between its steps)."""
        with self.changed:
            self.stop_requested = self.stop_requested or reason
            self.changed.notify_all()

    def ask_ranks_to_stop(self, reason: str) -> None:
        """Tell every rank to stop gracefully: `stopping()` turns true, `stop_reason` is `reason`; the ranks
        decide how to end (save, return), within their grace period; nothing is aborted."""
        self._server.broadcast(*m.encode(self._stop(reason)))

    def stop_ranks(self, grace_s: float) -> None:
        """Ask every rank to stop (SIGTERM: `sparkrunner.stopping()` turns true), wait up to `grace_s` for
        the ranks that save to leave, then abort whatever is left. A second Ctrl-C skips the rest of the grace
        period."""
        self._server.broadcast(*m.encode(self._stop("stop")))
        # a stopped rank cannot act on it: continued, it reads the Stop (in Spark its task does this)
        processes.continue_stopped(self._ranks_on_this_machine())
        try:
            with self.changed:
                self.changed.wait_for(self.report.savers_gone, grace_s)
                self.changed.wait_for(self.report.all_gone, 0 if self.report.any_wants_grace() else grace_s)
        finally:  # also on a second Ctrl-C, which then cuts the rest of the shutdown short
            self.abort_ranks()

    def _stop(self, reason: str) -> m.Stop:
        with self.changed:
            return m.Stop(reason=reason, peers_save=self.report.any_wants_grace())

    def ranks_ended_here(self) -> bool:
        """True once every rank reported and ran on this machine (np < 0), and each one's process has ended:
        what is left (mpirun held up by a daemon a rank left on its output) need not be waited for."""
        with self.changed:
            states = list(self.report.ranks.values())
            done = self.report.all_done()
        return done and all(s.task is None and s.pid and processes.ended(s.pid) for s in states)

    def wait_until(self, predicate: Callable[[], bool], seconds: float) -> bool:
        """Wait (the caller holds `changed`) until `predicate()`; polled, so changes nobody notifies count."""
        deadline = time.monotonic() + seconds
        while not predicate():
            if time.monotonic() >= deadline:
                return False
            self.changed.wait(FAILURE_POLL_S)
        return True

    def output_delivered(self) -> bool:
        """True once the output relay of every rank that connected has hung up, after its last line was shown;
        the caller holds `changed`."""
        return self.report.output_ended.issuperset(self.report.ranks)

    def _ranks_on_this_machine(self) -> list[int]:
        """Pids of the live ranks that run on the driver (np < 0), the only pids that mean something here."""
        with self.changed:
            return [s.pid for s in self.report.ranks.values() if s.task is None and s.pid and not s.gone]

    def close(self) -> None:
        self._server.close()
