"""Every timing sparkrunner uses, in one place: a name, a default, what it bounds, and an environment override.

``SPARKRUNNER_<NAME>`` (e.g. ``SPARKRUNNER_HANDSHAKE_TIMEOUT_S=60``) replaces a default; it is read once, when
this module is first imported, in every process (the driver, Spark tasks and ranks each read their own
environment). `docs/timeouts.md` is the table of them all, generated from `TIMINGS` (`markdown_table`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sparkrunner.errors import InvalidArgumentError

ENV_PREFIX = "SPARKRUNNER_"


@dataclass(frozen=True)
class Timing:
    """One named timing: its default, the value in force here, and what it bounds."""

    name: str
    default: float
    value: float
    bounds: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name


TIMINGS: dict[str, Timing] = {}


def _timing(name: str, default: float, bounds: str) -> float:
    """Register `name`, and return its value: ``SPARKRUNNER_<name>`` when set, else `default`."""
    text = os.environ.get(ENV_PREFIX + name)
    try:
        value = default if not text else float(text)
    except ValueError:
        raise InvalidArgumentError(
            f"{ENV_PREFIX}{name}={text!r} is not a number of seconds; unset it or give e.g. {default:g}"
        ) from None
    if value < 0:
        raise InvalidArgumentError(f"{ENV_PREFIX}{name}={text!r} must be a number of seconds >= 0")
    TIMINGS[name] = Timing(name, default, value, bounds)
    return value


# -- options' defaults
START_TIMEOUT_S = _timing(
    "START_TIMEOUT_S", 600.0, "default `Runner(start_timeout=)`: every rank started and connected"
)
STOP_GRACE_S = _timing(
    "STOP_GRACE_S", 10.0, "default `Runner(stop_grace_s=)`: SIGTERM to SIGKILL of a stopping rank (also how ranks "
    "learn the run's value)"
)  # fmt: skip
SESSION_IDLE_S = _timing(
    "SESSION_IDLE_S", 600.0, "default `Runner.session(idle_timeout=)`: a warm session without a run for this long "
    "stops its ranks and frees their Spark slots (the next run starts new ones)"
)  # fmt: skip

# -- the driver
SUPERVISE_POLL_S = _timing(
    "SUPERVISE_POLL_S", 0.1, "the driver's supervision loop: between checks when nothing happens"
)
FINISH_GRACE_S = _timing(
    "FINISH_GRACE_S",
    5.0,
    "after the placement ended, for the last results to arrive before ranks count as missing",
)
EXIT_WAIT_S = _timing(
    "EXIT_WAIT_S", 30.0, "after a successful run, for the rank processes to exit on their own"
)
OUTPUT_END_WAIT_S = _timing(
    "OUTPUT_END_WAIT_S",
    5.0,
    "after a successful run whose ranks exited, for the driver to take in the last lines their output relays sent",
)
SWEEP_GRACE_S = _timing("SWEEP_GRACE_S", 2.0, "for a run's leftover processes to end before they are killed")
EXIT_POLL_S = _timing(
    "EXIT_POLL_S",
    0.005,
    "after a successful run: between two looks for the ranks' exit (the Spark job's end)",
)
MLFLOW_PARAMS_AFTER_S = _timing(
    "MLFLOW_PARAMS_AFTER_S", 1.0, "into a tracked run, before its MLflow parameters are written (a run that ends "
    "sooner writes them with its end)"
)  # fmt: skip
SWEEP_POLL_S = _timing("SWEEP_POLL_S", 0.05, "between two looks for a run's leftover processes")
FAILURE_SETTLE_S = _timing(
    "FAILURE_SETTLE_S", 1.0, "when the first failure looks like a consequence (a peer hung up), for its cause"
)
FAILURE_DETAIL_WAIT_S = _timing(
    "FAILURE_DETAIL_WAIT_S", 3.0, "for the exit code of a rank whose connection ended without a result"
)
FAILURE_REPORT_IN_FLIGHT_S = _timing(
    "FAILURE_REPORT_IN_FLIGHT_S",
    0.5,
    "once the barrier stage ended (a lost executor fails it), for a task report already sent to arrive",
)
FAILURE_PLACEMENT_WAIT_S = _timing(
    "FAILURE_PLACEMENT_WAIT_S",
    15.0,
    "when a dead rank's barrier task never reported (its executor was lost), for Spark to say why",
)
FAILURE_OUTPUT_WAIT_S = _timing("FAILURE_OUTPUT_WAIT_S", 2.0, "for the rest of a failed rank's output")
FAILURE_POLL_S = _timing("FAILURE_POLL_S", 0.02, "between checks while waiting for a failure's details")
STACK_ANSWER_TIMEOUT_S = _timing(
    "STACK_ANSWER_TIMEOUT_S", 3.0, "for every rank's thread dump (stall, hang, dump_stacks)"
)
LOGGED_UPDATE_INTERVAL_S = _timing(
    "LOGGED_UPDATE_INTERVAL_S", 10.0, "between two logged copies of a rank's in-place (\\r) output line"
)
ELASTIC_WAIT_S = _timing(
    "ELASTIC_WAIT_S",
    10.0,
    "an elastic run (np=(min, max)) waits this long for max slots before it starts smaller",
)
ELASTIC_POLL_S = _timing(
    "ELASTIC_POLL_S", 1.0, "between two looks, during an elastic attempt below max, for slots to grow into"
)
SLOTS_POLL_S = _timing("SLOTS_POLL_S", 0.25, "between two looks at the cluster's free task slots")
DECOMMISSION_CHECK_S = _timing("DECOMMISSION_CHECK_S", 1.0, "between two looks for decommissioning executors")
BACKGROUND_STOP_JOIN_S = _timing(
    "BACKGROUND_STOP_JOIN_S", 60.0, "for the background Spark job's thread after a stop"
)
BACKGROUND_CANCEL_REPEAT_S = _timing(
    "BACKGROUND_CANCEL_REPEAT_S",
    1.0,
    "between two cancels of a stopped run's Spark job while its thread still runs",
)
DATA_PROGRESS_EVERY_S = _timing(
    "DATA_PROGRESS_EVERY_S", 5.0, "between two progress lines of a materialize job"
)
ANATOMY_WINDOW_S = _timing(
    "ANATOMY_WINDOW_S", 5.0, "the longest window of steps a rank sums up in one step-anatomy message"
)
ANATOMY_TABLE_EVERY_S = _timing(
    "ANATOMY_TABLE_EVERY_S", 10.0, "between two per-rank step-anatomy tables in the driver's log (terminal)"
)
LIVE_VIEW_REFRESH_S = _timing(
    "LIVE_VIEW_REFRESH_S",
    1.0,
    "between two redraws of the notebook's live view (a timer, while the run goes)",
)
TOOL_TIMEOUT_S = _timing("TOOL_TIMEOUT_S", 20.0, "`sparkrunner check`: one external tool's version command")

# -- the channel
HANDSHAKE_TIMEOUT_S = _timing(
    "HANDSHAKE_TIMEOUT_S", 20.0, "a client connecting and authenticating to a channel"
)
SERVER_HANDSHAKE_TIMEOUT_S = _timing(
    "SERVER_HANDSHAKE_TIMEOUT_S", 5.0, "the server, for a connected peer to prove it knows the secret"
)
CONNECT_RETRY_PAUSE_S = _timing(
    "CONNECT_RETRY_PAUSE_S", 0.05, "between two connection attempts or accept retries"
)
SELECT_TIMEOUT_S = _timing(
    "SELECT_TIMEOUT_S", 0.25, "the channel server's select loop: between two looks at its state"
)

# -- Spark tasks and launchers
TASK_REPORT_CONNECT_TIMEOUT_S = _timing(
    "TASK_REPORT_CONNECT_TIMEOUT_S", 5.0, "a barrier task connecting to the driver to report its outcome"
)
LEFTOVER_GRACE_S = _timing(
    "LEFTOVER_GRACE_S", 0.5, "a barrier task, for its ranks' leftover processes to end"
)
FOLDER_WATCH_POLL_S = _timing(
    "FOLDER_WATCH_POLL_S", 0.5, "a temp folder's watcher: between two looks at whether its maker ended"
)
RENDEZVOUS_WAKE_S = _timing(
    "RENDEZVOUS_WAKE_S", 0.005, "the end of Horovod's Gloo rendezvous server (task 0, direct launcher): between two "
    "connections that wake its serving loop to see the shutdown"
)  # fmt: skip
DIRECT_POLL_S = _timing(
    "DIRECT_POLL_S", 0.01, "the direct launcher: between two checks of its rank processes"
)
RUN_END_CONNECT_WAIT_S = _timing(
    "RUN_END_CONNECT_WAIT_S", 60.0, "a task, for task 0's run-end server to listen"
)
RUN_END_TELL_WAIT_S = _timing(
    "RUN_END_TELL_WAIT_S", 10.0, "task 0, once mpirun ended, for the other tasks to ask"
)
RUN_OVER_EXIT_WAIT_S = _timing(
    "RUN_OVER_EXIT_WAIT_S", 2.0, "task 0, once the driver said every rank reported and hung up, for mpirun to exit "
    "on its own before its process tree is ended (a daemon a rank forked may hold it up)"
)  # fmt: skip
ZYGOTE_IDLE_S = _timing(
    "ZYGOTE_IDLE_S", 300.0, "an executor's zygote with no connection (no rank to fork or watch) ends itself"
)
DRIVER_ZYGOTE_IDLE_S = _timing(
    "DRIVER_ZYGOTE_IDLE_S", 3600.0, "the driver's import zygote (np < 0 runs) without a run ends itself (the next "
    "run starts a new one, importing again)"
)  # fmt: skip
ZYGOTE_POLL_S = _timing(
    "ZYGOTE_POLL_S", 0.05, "a zygote: between two looks at its forked ranks, its executor and its idle time"
)
ZYGOTE_WARM_AFTER_S = _timing(
    "ZYGOTE_WARM_AFTER_S", 1.0, "a zygote, idle this long after its last fork, imports what ranks load on first use "
    "(torch._dynamo, pyarrow.dataset) for the next attempt's"
)  # fmt: skip
ZYGOTE_START_WAIT_S = _timing(
    "ZYGOTE_START_WAIT_S", 120.0, "a barrier task, for a new zygote to import the run's modules and listen "
    "(past it, the rank starts cold)"
)  # fmt: skip
AGENT_START_WAIT_S = _timing("AGENT_START_WAIT_S", 60.0, "mpirun's rsh agent, for a task's agent to listen")
PROCESS_READER_JOIN_S = _timing("PROCESS_READER_JOIN_S", 5.0, "for a finished process's output reader thread")
PROCESS_READER_POLL_S = _timing(
    "PROCESS_READER_POLL_S", 0.01, "between two looks for a finished process's last output to be read"
)
PROCESS_KILL_WAIT_S = _timing("PROCESS_KILL_WAIT_S", 10.0, "for a SIGKILLed process to be reaped")
NVIDIA_SMI_TIMEOUT_S = _timing("NVIDIA_SMI_TIMEOUT_S", 10.0, "`nvidia-smi -L` counting a host's GPUs")

# -- ranks
RESULT_ACK_TIMEOUT_S = _timing(
    "RESULT_ACK_TIMEOUT_S", 30.0, "a rank, for the driver to acknowledge its result"
)
RELAY_STOP_WAIT_S = _timing(
    "RELAY_STOP_WAIT_S", 2.0, "a rank's output relay, to forward its last lines at the end"
)
RELAY_STOP_POLL_S = _timing("RELAY_STOP_POLL_S", 0.01, "a rank's output relay: between two looks for its end")
RELAY_UPDATE_INTERVAL_S = _timing(
    "RELAY_UPDATE_INTERVAL_S", 0.2, "a rank's output relay: between two sends of an in-place (\\r) line"
)
BARRIER_SYNC_TIMEOUT_S = _timing(
    "BARRIER_SYNC_TIMEOUT_S", 3600.0, "`BarrierTaskContext.get().barrier()` / `allGather()` in a rank, for every "
    "other rank to reach the same call"
)  # fmt: skip
PREFETCH_POLL_S = _timing("PREFETCH_POLL_S", 0.1, "the data prefetch thread: between two looks for a stop")
PREFETCH_JOIN_S = _timing("PREFETCH_JOIN_S", 30.0, "for the data prefetch thread to end when iteration stops")
BUILD_LOCK_MIN_AGE_S = _timing(
    "BUILD_LOCK_MIN_AGE_S", 10.0, "a rank that imports DeepSpeed: how old a torch extension build lock no process "
    "holds open must be before it is removed as stale (its builder was killed halfway)"
)  # fmt: skip


def markdown_table() -> str:
    """The docs table: one row per timing (name, default, environment variable, what it bounds)."""
    rows = [f"| `{t.name}` | {t.default:g} | `{t.env}` | {t.bounds} |" for t in TIMINGS.values()]
    return "\n".join(
        ["| name | default (s) | environment variable | what it bounds |", "|---|---|---|---|", *rows]
    )
