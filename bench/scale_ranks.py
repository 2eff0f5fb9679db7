"""Simulated barrier tasks and ranks for `bench/scale.py`: one process holds many real channel connections.

Each simulated task joins the address exchange (`Join`) and waits for `Topology`; each simulated rank says
`Hello`, opens its output relay (`OutputStream`, then `Output` batches), reports `Progress`, answers
`DumpStacks` with `Stacks`, sends its `Result` and leaves on `Ack`. Every connection is a real encrypted
`Connection`; one reader thread per process serves them all through a selector. What reached the simulated
side is counted here, independently of the driver's bookkeeping.
"""

from __future__ import annotations

import os
import pickle
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from typing import Any

from sparkrunner.channel import Connection, connect
from sparkrunner.channel import messages as m

LINES_PER_BATCH = 100
"""Lines per `Output` message, about what a rank's relay reads at once from a busy pipe."""
PHASE_TIMEOUT_S = 300.0
"""The longest a phase may wait for the driver before the harness gives up on the run."""


@dataclass
class Counts:
    """What the simulated side received, per kind, and when the last topology arrived."""

    topologies: int = 0
    payloads: int = 0
    stacks_asked: int = 0
    acks: int = 0
    join_sent: list[float] = field(default_factory=list)
    topology_at: list[float] = field(default_factory=list)


class SimulatedRanks:
    """The tasks and ranks `ranks` of a run of `num_ranks`, one task per rank, in this process."""

    def __init__(self, address: tuple[str, int], secret: bytes, ranks: list[int], num_ranks: int) -> None:
        self._address, self._secret = address, secret
        self._ranks, self._num_ranks = ranks, num_ranks
        self._rank_conns: dict[int, Connection] = {}
        self._relays: dict[int, Connection] = {}
        self._tasks: list[Connection] = []
        self.counts = Counts()
        self._changed = threading.Condition()
        self._selector = selectors.DefaultSelector()
        self._new: queue.Queue[tuple[Connection, int | None] | None] = queue.Queue()  # None: stop
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._selector.register(self._wake_reader, selectors.EVENT_READ, None)
        self._reader = threading.Thread(target=self._read_loop, name="sim-reader", daemon=True)
        self._reader.start()

    def _watch(self, conn: Connection | None, rank: int | None) -> None:
        """Hand `conn` to the reader thread (which alone touches the selector); None stops it."""
        self._new.put(None if conn is None else (conn, rank))
        self._wake_writer.send(b"x")

    def _read_loop(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.data is None:
                    if not self._drain_new():
                        return
                    continue
                conn, rank = key.data
                try:
                    self._on_message(conn, rank, m.receive(conn))
                except Exception:  # the driver closed it: stop watching
                    self._selector.unregister(key.fileobj)

    def _drain_new(self) -> bool:
        self._wake_reader.recv(4096)
        while not self._new.empty():
            item = self._new.get()
            if item is None:
                return False
            conn, rank = item
            self._selector.register(conn, selectors.EVENT_READ, (conn, rank))
        return True

    def _on_message(self, conn: Connection, rank: int | None, message: m.Message) -> None:
        with self._changed:
            match message:
                case m.Topology(tasks=tasks):
                    self.counts.topology_at.append(time.time())
                    self.counts.topologies += len(tasks) == self._num_ranks
                case m.Payload():
                    self.counts.payloads += 1
                case m.DumpStacks(request=request):
                    self.counts.stacks_asked += 1
                    m.send(conn, m.Stacks(request, os.getpid(), f"Thread main (rank {rank})\n", "train_fn"))
                case m.Ack():
                    self.counts.acks += 1
                    self._selector.unregister(conn)
                    conn.close()
                    if rank is not None:
                        self._relays[rank].close()
            self._changed.notify_all()

    def _wait(self, done: Callable[[], bool]) -> None:
        """Wait for what the driver should send; a phase that never completes fails the client (and its run)."""
        with self._changed:
            if not self._changed.wait_for(done, PHASE_TIMEOUT_S):
                raise TimeoutError(f"the driver did not answer within {PHASE_TIMEOUT_S} s: {self.counts}")

    def join(self) -> dict[str, Any]:
        """Every task joins the address exchange and waits for the topology."""
        for task in self._ranks:
            conn = connect(self._address, self._secret)
            self._tasks.append(conn)
            self._watch(conn, None)
            entries = [m.RankAddress(f"sim-{task // 8}", (20000 + task,), ())]
            with self._changed:
                self.counts.join_sent.append(time.time())
            m.send(conn, m.Join(task, self._num_ranks, m.SparkTask(1000 + task, 0, {}), entries))
        self._wait(lambda: len(self.counts.topology_at) == len(self._ranks))
        return {"join_sent": self.counts.join_sent, "topology_at": self.counts.topology_at}

    def hello(self) -> None:
        """Every rank connects, says hello, gets the payload, and opens its output relay."""
        for rank in self._ranks:
            conn = connect(self._address, self._secret)
            self._rank_conns[rank] = conn
            self._watch(conn, rank)
            m.send(conn, m.Hello(rank, f"sim-{rank // 8}", os.getpid(), rank))
            relay = connect(self._address, self._secret)
            self._relays[rank] = relay
            m.send(relay, m.OutputStream(rank))
        self._wait(lambda: self.counts.payloads == len(self._ranks))

    def output(self, lines_per_rank: int) -> None:
        """Every rank prints `lines_per_rank` lines in batches, and reports progress after each batch."""
        for batch in range(0, lines_per_rank, LINES_PER_BATCH):
            lines = [f"step {batch + i} loss 0.{batch + i:06d}" for i in range(LINES_PER_BATCH)]
            lines = lines[: lines_per_rank - batch]
            for rank in self._ranks:
                m.send(self._relays[rank], m.Output("stdout", lines))
                m.send(
                    self._rank_conns[rank], m.Progress(batch, 0, lines_per_rank, None, time.monotonic(), {})
                )

    def end(self) -> None:
        """Every rank reports its result and leaves once the driver acknowledged it; tasks hang up."""
        for rank in self._ranks:
            value = pickle.dumps(rank) if rank == 0 else None
            m.send(self._rank_conns[rank], m.Result(value))
        self._wait(lambda: self.counts.acks == len(self._ranks))
        for conn in self._tasks:
            conn.close()

    def close(self) -> None:
        self._watch(None, None)
        self._reader.join()
        self._selector.close()


def serve(pipe: Pipe, address: tuple[str, int], secret: bytes, ranks: list[int], num_ranks: int) -> None:
    """A client process: run the phases the harness sends over `pipe`, answer each with what it counted."""
    sim = SimulatedRanks(address, secret, ranks, num_ranks)
    while True:
        phase, arg = pipe.recv()
        match phase:
            case "join":
                pipe.send(sim.join())
            case "hello":
                sim.hello()
                pipe.send(None)
            case "output":
                sim.output(arg)
                pipe.send(None)
            case "end":
                sim.end()
                pipe.send(vars(sim.counts) | {"join_sent": [], "topology_at": []})
            case _:
                sim.close()
                return
