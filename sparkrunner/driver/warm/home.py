"""The driver end of a warm session's long-lived ranks: their home connections, and each run's `Serve`.

The ranks of a warm session connect here once (`Hello`), as their barrier tasks do for the address exchange
(`Join`). Each run then has its own `AttemptChannel`, as a cold run does; the home only tells every rank where
that run's channel is, and passes on to it the barrier tasks' `TaskReport`s (a rank that died in the run).
"""

from __future__ import annotations

import contextlib
import logging
import threading

from sparkrunner import channel
from sparkrunner.channel import ChannelServer, Connection, new_secret
from sparkrunner.channel import messages as m
from sparkrunner.driver.attempt.addresses import AddressBook
from sparkrunner.errors import ChannelError

log = logging.getLogger(__name__)


class WarmHome:
    """Serves the ranks of one launch of a warm session; `lost()` names those whose connection ended."""

    def __init__(self, bind_host: str, port: int = 0) -> None:
        self.secret = new_secret()
        self._lock = threading.Lock()
        self._rank_of: dict[int, int] = {}  # id(connection) -> rank
        self._conns: dict[int, Connection] = {}  # rank -> its home connection
        self._lost: list[int] = []
        self._serving: m.Serve | None = None
        self._run: tuple[tuple[str, int], bytes] | None = None  # the run in flight: its channel and secret
        self.addresses = AddressBook()
        """The launch's barrier tasks (their Spark task ids: decommission checks read them)."""
        self.server = ChannelServer(
            self.secret, m.serving(self._on_message), self._on_disconnect, bind_host, port
        )

    def _on_message(self, conn: Connection, message: m.Message) -> None:
        match message:
            case m.Hello(rank=rank):
                with self._lock:
                    self._rank_of[id(conn)] = rank
                    self._conns[rank] = conn
                    if self._serving is not None:  # the run was served before this rank came up
                        m.send(conn, self._serving)
            case m.Join():
                self.addresses.join(conn, message)
            case m.TaskReport():
                self._pass_on(message)
            case _:
                raise ChannelError(f"a warm rank sent a {message.kind!r} message on its home connection")

    def _on_disconnect(self, conn: Connection) -> None:
        with self._lock:
            rank = self._rank_of.pop(id(conn), None)
            if rank is not None:
                self._conns.pop(rank, None)
                self._lost.append(rank)

    def _pass_on(self, report: m.TaskReport) -> None:
        """Hand a barrier task's report to the run in flight (between runs its rank counts as lost)."""
        with self._lock:
            run = self._run
        if run is None:
            log.debug("barrier task %d of a warm session ended between runs", report.task)
            return
        with contextlib.suppress(ChannelError):
            conn = channel.connect(*run)
            m.send(conn, report)
            conn.close()

    def serve(self, driver: tuple[str, int], secret: bytes, env: dict[str, str]) -> None:
        """Send every rank (those still to connect when they do) the run whose channel is at `driver`."""
        serving = m.Serve(f"{driver[0]}:{driver[1]}", secret, env)
        with self._lock:
            self._serving, self._run = serving, (driver, secret)
            conns = list(self._conns.values())
        m.send_to_all(conns, serving)

    def end_run(self) -> None:
        with self._lock:
            self._serving = self._run = None

    def lost(self) -> list[int]:
        """Ranks whose home connection ended: they died (or were told to end), and are not reusable."""
        with self._lock:
            return list(self._lost)

    def close(self) -> None:
        """Tell every rank to end (`Abort`: itself and its children), then stop serving."""
        self.server.broadcast(*m.encode(m.Abort()))
        self.server.close()
