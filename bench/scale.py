"""Scale harness: the real driver side against 64 to 4,096 simulated ranks that speak the real protocol.

The driver runs in its own process: a `AttemptChannel` (its `ChannelServer`, the address exchange, rank
output shown with verbosity "all" into /dev/null, progress, `collect_stacks`, and the run's end through the
`Supervisor`). Several client processes (`bench/scale_ranks.py`) each hold many real encrypted connections:
per rank a task that joins and waits for the topology, the rank's own connection and its output relay.
One table row per size: the address exchange (first join to the topology at every task, and the last join to
it), the driver's CPU seconds, peak RSS and peak threads, output lines/s forwarded with every rank printing,
`dump_stacks` latency and the time to end the run (results sent to every rank acknowledged and gone).

    PYTHONPATH=$PWD .venv/bin/python bench/scale.py [--sizes 64 256 1024] [--workers 8]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import resource
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection as Pipe
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any

from bench.scale_ranks import PHASE_TIMEOUT_S, serve
from sparkrunner.common.rank_job import RankJob
from sparkrunner.driver.attempt import addresses
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.attempt.stacks import StallWatch
from sparkrunner.driver.supervisor import StillRunning, Supervisor, error_of
from sparkrunner.observe.events import ProgressEvent
from sparkrunner.observe.observers import RunObserver
from sparkrunner.placement import QuietPlacement
from sparkrunner.timeouts import SUPERVISE_POLL_S

TOTAL_LINES = 200_000
"""Lines printed per size, shared out among the ranks (every rank prints)."""


def raise_fd_limit() -> None:
    """Three connections per rank on the driver: let this process open as many descriptors as it may."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class _Counting(RunObserver):
    """Counts the output lines and progress reports the session forwarded to its observers."""

    def __init__(self) -> None:
        self.lines = 0
        self.progress = 0
        self.changed = threading.Condition()

    def on_rank_output(self, rank: int, stream: str, lines: list[str]) -> None:
        with self.changed:
            self.lines += len(lines)
            self.changed.notify_all()

    def wait_for_lines(self, wanted: int) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.lines >= wanted, PHASE_TIMEOUT_S)

    def on_progress(self, rank: int, progress: ProgressEvent) -> None:
        with self.changed:
            self.progress += 1


class _SimulatedPlacement(QuietPlacement):
    """The ranks live in the client processes: nothing to start, stop or ask. A subclass of the protocol (through
    `QuietPlacement`), so `mypy bench/scale.py` checks that it is whole (a missing `cancelled` once hung the
    harness)."""

    def start(self, job: RankJob, description: str = "") -> None:
        pass

    def finished(self) -> bool:
        return False

    def stop(self) -> None:
        pass


class _ThreadPeak:
    """Samples this process's thread count every few milliseconds and keeps the largest."""

    def __init__(self) -> None:
        self.peak = threading.active_count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, threading.active_count())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak - 1  # not counting the sampler


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _time_topology_sends() -> list[float]:
    """Record when the driver finished sending the topology to every task (the tasks' own decoding, all on
    this machine's cores here, would otherwise count as the driver's)."""
    sent: list[float] = []
    send_to_all = addresses.send_to_all

    def timed(conns: Any, message: Any) -> None:
        send_to_all(conns, message)
        sent.append(time.time())

    addresses.send_to_all = timed
    return sent


def run_driver(pipe: Pipe, num_ranks: int) -> None:
    """The driver process: serve one simulated run, phase by phase as the harness asks."""
    raise_fd_limit()
    topology_sent = _time_topology_sends()
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - verbosity "all": every line is written, to nowhere
    counting = _Counting()
    cpu = _cpu_s()
    threads = _ThreadPeak()
    session = AttemptChannel(b"payload", num_ranks, "all", "127.0.0.1", counting)
    pipe.send((session.port, session.secret))
    while True:
        phase, arg = pipe.recv()
        if phase == "lines":
            counting.wait_for_lines(arg)
            pipe.send(time.time())
        elif phase == "stacks":
            start = time.perf_counter()
            report = session.collect_stacks()
            answered = sum(1 for s in report.ranks.values() if s.threads is not None)
            pipe.send((time.perf_counter() - start, answered))
        else:
            _end(session)
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            figures = {"cpu_s": _cpu_s() - cpu, "rss_mb": rss_mb, "threads": threads.stop()}
            pipe.send(figures | {"topology_sent": topology_sent[0]})
            return


def _end(session: AttemptChannel) -> None:
    """What `Runner` does at the end of a run: supervise until every rank reported, wait for them to leave."""
    stall = StallWatch(None, "warn")
    supervisor = Supervisor(session, _SimulatedPlacement(), 600.0, None, stall)
    with session.changed:
        while isinstance(outcome := supervisor.step(), StillRunning):
            session.changed.wait(SUPERVISE_POLL_S)
    error = error_of(outcome)
    if error is not None:
        raise error
    report = session.report

    def everyone_left() -> bool:
        return report.all_gone() and len(report.output_ended) == report.num_ranks

    with session.changed:
        if not session.changed.wait_for(everyone_left, PHASE_TIMEOUT_S):
            raise TimeoutError(f"not every rank left within {PHASE_TIMEOUT_S} s")
    session.close()


@dataclass(frozen=True)
class Row:
    """One size's figures."""

    ranks: int
    join_span_s: float
    sent_after_last_join_s: float
    after_last_join_s: float
    cpu_s: float
    rss_mb: float
    threads: int
    lines_per_s: float
    stacks_s: float
    end_s: float
    topologies: int
    acks: int
    stacks_answered: int


def _answer(pipe: Pipe, process: BaseProcess) -> Any:
    """`process`'s answer on `pipe`; an error, not a hang, when it died or did not answer in time."""
    if pipe not in wait([pipe, process.sentinel], PHASE_TIMEOUT_S):
        raise RuntimeError(f"{process.name} ended (exit code {process.exitcode}) or did not answer in time")
    return pipe.recv()


def _ask(pipes: list[Pipe], processes: Sequence[BaseProcess], phase: str, arg: Any = None) -> list[Any]:
    for pipe in pipes:
        pipe.send((phase, arg))
    return [_answer(pipe, process) for pipe, process in zip(pipes, processes, strict=True)]


def _stop(processes: Sequence[BaseProcess], pipes: list[Pipe]) -> None:
    """Ask the clients to quit, give every process a while to end, then kill what is left (after a failure)."""
    for pipe in pipes:
        with contextlib.suppress(OSError):
            pipe.send(("quit", None))
    for process in processes:
        process.join(30)
        if process.is_alive():
            process.kill()
            process.join()


def measure(num_ranks: int, workers: int = 8, total_lines: int = TOTAL_LINES) -> Row:
    """Run one simulated run of `num_ranks` ranks against a driver process; return its figures."""
    raise_fd_limit()
    ctx = multiprocessing.get_context("spawn")
    driver_pipe, there = ctx.Pipe()
    driver = ctx.Process(target=run_driver, args=(there, num_ranks), daemon=True)
    driver.start()
    port, secret = _answer(driver_pipe, driver)
    shares = [list(range(num_ranks))[w::workers] for w in range(workers)]
    pipes: list[Pipe] = []
    clients: list[BaseProcess] = []
    for share in shares:
        pipe, other = ctx.Pipe()
        client = ctx.Process(target=serve, args=(other, ("127.0.0.1", port), secret, share, num_ranks))
        client.start()
        pipes.append(pipe)
        clients.append(client)
    try:
        joined = _ask(pipes, clients, "join")
        join_sent = [t for j in joined for t in j["join_sent"]]
        topology_at = max(t for j in joined for t in j["topology_at"])
        _ask(pipes, clients, "hello")
        lines_per_rank = max(total_lines // num_ranks, 1)
        start = time.time()
        driver_pipe.send(("lines", lines_per_rank * num_ranks))
        _ask(pipes, clients, "output", lines_per_rank)
        lines_per_s = lines_per_rank * num_ranks / (_answer(driver_pipe, driver) - start)
        driver_pipe.send(("stacks", None))
        stacks_s, answered = _answer(driver_pipe, driver)
        start = time.time()
        driver_pipe.send(("end", None))
        counts = _ask(pipes, clients, "end")
        figures = _answer(driver_pipe, driver)
        end_s = time.time() - start
    finally:
        _stop([*clients, driver], pipes)
    return Row(
        num_ranks,
        topology_at - min(join_sent),
        figures["topology_sent"] - max(join_sent),
        topology_at - max(join_sent),
        figures["cpu_s"],
        figures["rss_mb"],
        figures["threads"],
        lines_per_s,
        stacks_s,
        end_s,
        sum(c["topologies"] for c in counts),
        sum(c["acks"] for c in counts),
        answered,
    )


HEADER = (
    f"{'ranks':>6} {'join->topo s':>12} {'last->sent s':>12} {'last->topo s':>12} {'cpu s':>7} {'RSS MB':>7} {'threads':>7} "
    f"{'lines/s':>9} {'stacks s':>8} {'end s':>6}  reached (topology/end/stacks)"
)


def format_row(row: Row) -> str:
    return (
        f"{row.ranks:>6} {row.join_span_s:>12.2f} {row.sent_after_last_join_s:>12.3f} {row.after_last_join_s:>12.3f} {row.cpu_s:>7.1f} "
        f"{row.rss_mb:>7.0f} {row.threads:>7} {row.lines_per_s:>9,.0f} {row.stacks_s:>8.2f} {row.end_s:>6.2f}"
        f"  {row.topologies}/{row.acks}/{row.stacks_answered}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(HEADER)
    for size in args.sizes:
        print(format_row(measure(size, args.workers)), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
