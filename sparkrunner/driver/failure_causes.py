"""The true cause of a failed run: the first rank that died or raised (not a peer's consequential error),
where it ran (rank, barrier task, host, pid: one numbering) and the last lines it printed."""

from __future__ import annotations

import re

from sparkrunner.channel import messages as m
from sparkrunner.driver.attempt import task_reports
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.attempt.registry import RankState
from sparkrunner.errors import RankFailedError, RankProcessDiedError, RanksVanishedError
from sparkrunner.frameworks import horovod_env
from sparkrunner.launch.mpirun import rank_exit_from_banner
from sparkrunner.placement import Placement
from sparkrunner.stack_report import ERROR_TAIL_LINES
from sparkrunner.timeouts import (
    FAILURE_DETAIL_WAIT_S,
    FAILURE_OUTPUT_WAIT_S,
    FAILURE_PLACEMENT_WAIT_S,
    FAILURE_REPORT_IN_FLIGHT_S,
    FAILURE_SETTLE_S,
)

_CONSEQUENTIAL = re.compile(
    r"connection (closed|reset) by peer|broken pipe|communicator was aborted|has been shut ?down|"
    r"timed out|timeout|peer .*(closed|lost|disconnect)",
    re.IGNORECASE,
)


def location(state: RankState | None) -> str:
    """``barrier task 1, host h, pid 42``: the same numbering in every message."""
    if state is None:
        return ""
    task = [] if state.task is None else [f"barrier task {state.task}"]
    return ", ".join([*task, f"host {state.host}", f"pid {state.pid}"])


def run_failure(channel: AttemptChannel, placement: Placement) -> RankFailedError:
    """The error to raise once a rank raised or vanished: the first cause, the others as `other_failures`."""
    if not any(_is_cause(channel, r) for r in _failed_ranks(channel)):
        channel.wait_until(
            lambda: any(_is_cause(channel, r) for r in _failed_ranks(channel)), FAILURE_SETTLE_S
        )
    ranks = _failed_ranks(channel)
    first = next((r for r in ranks if _is_cause(channel, r)), ranks[0])
    error = _describe(channel, placement, first, wait=True)
    error.other_failures = [_describe(channel, placement, r, wait=False) for r in ranks if r != first]
    return error


def _failed_ranks(channel: AttemptChannel) -> list[int]:
    states = channel.report.ranks
    failed = [r for r, s in states.items() if s.failed_at is not None]
    return sorted(failed, key=lambda r: states[r].failed_at or 0.0)


def _raised(channel: AttemptChannel, rank: int) -> RankFailedError | None:
    return next((e for e in channel.report.errors if e.rank == rank), None)


def _is_cause(channel: AttemptChannel, rank: int) -> bool:
    """A rank that died, or raised something other than a peer's hang-up, is a cause, not a consequence."""
    raised = _raised(channel, rank)
    return raised is None or not _CONSEQUENTIAL.search(f"{raised.exc_type}: {raised.exc_message}")


def _describe(channel: AttemptChannel, placement: Placement, rank: int, wait: bool) -> RankFailedError:
    state = channel.report.ranks.get(rank)
    if wait:  # the relay may still be sending what the rank printed last
        channel.wait_until(lambda: rank in channel.report.output_ended, FAILURE_OUTPUT_WAIT_S)
    full_tail = channel.output.tail(rank)
    tail = tuple(full_tail[-ERROR_TAIL_LINES:])
    raised = _raised(channel, rank)
    if raised is not None:
        error = RankFailedError(
            rank, raised.exc_type, raised.exc_message, raised.remote_traceback, raised.original,
            location(state), tail,
        )  # fmt: skip
    else:
        detail = _exit_detail(channel, placement, rank, state, wait)  # waits for the exit to be known
        code = _exit_code(channel, placement, rank, state)
        if code is not None and state is not None and state.task is None:  # on the driver: its own exit
            detail = f"process {state.pid} ended with {task_reports.exit_text(code)}"
        message = f"its process ended without reporting a result: {detail}"
        hint = horovod_env.rendezvous_failure(full_tail)
        message += f"\n{hint}" if hint else ""
        error = RankProcessDiedError(rank, message, location(state), tail, code)
    if full_tail:
        error.artifacts[f"output_rank{rank}.txt"] = "\n".join(full_tail) + "\n"
    return error


def _exit_detail(
    channel: AttemptChannel, placement: Placement, rank: int, state: RankState | None, wait: bool
) -> str:
    """How the rank's process ended: its barrier task's report, else what the placement knows."""
    reports = channel.report.task_reports
    task = state.task if state is not None else None

    pid = state.pid if state is not None else None

    def known() -> str | None:
        """The rank's own task's report, else the placement's word (a lost executor, also when mpirun says it
        lost a daemon on another host), else any task's."""
        own = _rank_report(channel, rank, state) if task is not None else None
        other = next(iter(reports.values()), None)
        said = placement.failure(pid) if own is None or task_reports.lost_a_daemon(own) else None
        return said or next((task_reports.describe(r) for r in (own, other) if r is not None), None)

    def settled() -> bool:
        """The rank's own task's report; under mpirun, task 0's (mpirun's banner speaks for every rank, also one
        on another host, whose task only served mpirun's daemon and reports nothing)."""
        own = reports.get(task) if task is not None else None
        mpirun = reports.get(0)
        own_said = own is not None and own.launcher != "mpirun"
        mpirun_said = mpirun is not None and mpirun.launcher == "mpirun"
        mpirun_lost_a_host = any(task_reports.lost_a_daemon(r) for r in reports.values())
        return (own_said or mpirun_said) and (not mpirun_lost_a_host or placement.failure(pid) is not None)

    if wait and task is None:
        channel.wait_until(lambda: known() is not None, FAILURE_DETAIL_WAIT_S)
    elif wait and not channel.wait_until(lambda: settled() or placement.finished(), FAILURE_DETAIL_WAIT_S):
        # its task never reported: its executor is gone with it, and Spark's word on why comes later
        channel.wait_until(lambda: placement.failure(pid) is not None, FAILURE_PLACEMENT_WAIT_S)
    if wait and task is not None and not settled():
        # the stage ended first (a lost executor fails it at once; task 0 ends once it sent mpirun's report): a
        # task that has not reported never will, and one that did may still be on its way
        channel.wait_until(settled, FAILURE_REPORT_IN_FLIGHT_S)
    return known() or "no exit code is known yet"


def _exit_code(
    channel: AttemptChannel, placement: Placement, rank: int, state: RankState | None
) -> int | None:
    """The rank process's exit code: from its barrier task's report, else from the placement; None if unknown."""
    if state is None or state.task is None:
        return placement.exit_code(rank, state.pid if state is not None else None)
    report = _rank_report(channel, rank, state)
    return report.exit_code if report is not None and not report.traceback else None


def _rank_report(channel: AttemptChannel, rank: int, state: RankState | None) -> m.TaskReport | None:
    """The report that speaks for the rank's process: its own task's. Under mpirun that says how mpirun ended
    (task 0), or there is none (a task on another host only serves mpirun's daemon, which started the rank):
    the rank's own exit is in mpirun's banner (task 0 ran mpirun), and its own output is what it relayed."""
    reports = channel.report.task_reports
    if state is None or state.task is None:
        return None
    own = reports.get(state.task)
    if own is not None and (own.launcher != "mpirun" or own.traceback):
        return own
    said = (rank_exit_from_banner(r.tail, rank) for r in reports.values() if r.launcher == "mpirun")
    code = next((c for c in said if c is not None), None)
    if code is None:
        return own
    # worded as the direct launcher's report of the rank's own process in its own task, on its own host: the
    # same outcome on both launchers, whichever host the rank ran on
    host = own.host if own is not None else state.host
    tail = "\n".join(channel.output.tail(rank))
    return m.TaskReport(state.task, host, "direct", exit_code=code, tail=tail)


def ended_without_result(channel: AttemptChannel, placement: Placement, missing: int) -> RanksVanishedError:
    """The ranks (or the Spark stage) ended and `missing` ranks never reported: say what the tasks said."""
    told = [task_reports.describe(r) for _, r in sorted(channel.report.task_reports.items())]
    spark = placement.failure()
    detail = "\n\n".join([*told, *([spark] if spark else [])]) or "the ranks ended without reporting"
    return RanksVanishedError(missing, detail)
