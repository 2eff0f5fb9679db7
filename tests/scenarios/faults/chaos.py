"""Faults put into a run of two ranks, and the outcome each must end with whatever the launcher: shared by the
fault matrix (tests/scenarios/faults/test_fault_matrix.py), the CI-sized soak and `bench/soak.py`.

Rank 1 meets the fault (rank 0 waits to be stopped, or returns `VALUE` when the run must succeed); faults the
driver's side makes (an executor JVM killed, the job group cancelled, a host cut off) start once rank 1 leaves `ARMED` in the
run's folder. Each rank records its temp folders and `MASTER_PORT` there (tests/scenarios/faults/leftovers.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sparkrunner import Runner
from sparkrunner.errors import (
    AttemptsFailedError,
    RankFailedError,
    RankProcessDiedError,
    RunCancelledError,
    RunTimeoutError,
)
from sparkrunner.options import LauncherName
from tests.recovery.processes import executor_jvm_of, rank_pid
from tests.scenarios.faults.leftovers import record_rank_folders
from tests.waiting import poll_until

VALUE = 42
ARMED = "armed"
TIMEOUT_S = 8.0
"""`timeout` of the runs whose rank hangs or is stopped: the run must end within it + `TIMEOUT_SLACK_S`."""
TIMEOUT_SLACK_S = 5.0
FAULT_END_S = 15.0
"""The most a run may take to end after rank 1 met its fault (or the driver's side made it)."""
STEPS = 6
"""Steps of the checkpointed run; rank 1 dies after the checkpoint of step `STEPS // 2` on attempt 0."""
START_TIMEOUT_S = 120.0
CUT_S = 3.0
"""How long a host is cut off from the others (the two-host fixture): shorter than any of Spark's or the
driver channel's timeouts, so the run must ride it out."""


def faulty_rank(fault: str, folder: str) -> Any:
    """Rank 1 meets `fault`; rank 0 returns `VALUE` for the faults a run survives, else waits to be stopped."""
    rank = int(os.environ.get("RANK") or os.environ["OMPI_COMM_WORLD_RANK"])
    record_rank_folders(folder, rank)
    if fault == "checkpointed":
        return _checkpointed(rank)
    if fault == "gloo":
        return _gloo_peer_leaves(rank, folder)
    if rank == 1:
        Path(folder, "fault-at").write_text(repr(time.monotonic()))
        print(f"rank 1 meets {fault}", flush=True)
        _rank_one_faults(fault, folder)
    if fault in ("none", "slow", "cut"):
        return VALUE if rank == 0 else None
    time.sleep(300)
    return None


def _rank_one_faults(fault: str, folder: str) -> None:
    if fault == "raise":
        raise ValueError("rank 1 gives up")
    if fault == "exit":
        os._exit(3)
    if fault in ("sigkill", "sigstop"):
        os.kill(os.getpid(), signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP)
    if fault == "slow":
        time.sleep(3)
    if fault in ("executor", "cancel", "cut"):
        Path(folder, ARMED).touch()
    if fault == "cut":
        time.sleep(CUT_S + 3)  # returns once its host is back
    if fault == "hang":
        time.sleep(300)


def _gloo_peer_leaves(rank: int, folder: str) -> Any:
    """Both ranks all-reduce in a loop; rank 1 leaves (exits 5) between two of them, rank 0 is inside one."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.ones(4)
    for step in range(1000):
        if rank == 1 and step == 3:
            Path(folder, "fault-at").write_text(repr(time.monotonic()))
            print("rank 1 meets gloo", flush=True)
            os._exit(5)
        dist.all_reduce(tensor)
        time.sleep(0.05)
    return None


def _checkpointed(rank: int) -> Any:
    """Rank 0 adds the squares of 0..STEPS-1, checkpointing after each step; on attempt 0 rank 1 SIGKILLs itself
    once step STEPS // 2 is saved. The retried attempt resumes from the checkpoint and returns the same sum."""
    import sparkrunner

    attempt = sparkrunner.rank_context().attempt
    if rank == 1:
        if attempt == 0:
            poll_until(lambda: (sparkrunner.load_checkpoint() or {}).get("next", 0) >= STEPS // 2, 60)
            os.kill(os.getpid(), signal.SIGKILL)
        return None
    state = sparkrunner.load_checkpoint() or {"next": 0, "total": 0}
    for step in range(state["next"], STEPS):
        state = {"next": step + 1, "total": state["total"] + step * step}
        sparkrunner.save_checkpoint(state, step=step + 1)
        if attempt == 0 and step + 1 == STEPS // 2:
            time.sleep(300)  # stopped once rank 1 died
    return (state["total"], attempt)


@dataclass(frozen=True)
class Expected:
    """The outcome a fault must end with: the error type (None: the run returns), what its message must say (in
    Spark too: `spark_says`) and never say, the rank it names, whether rank 1's last line is its output tail,
    and the most seconds the run may take: from its start (`timeout`) or from the fault."""

    error: type[BaseException] | None
    says: tuple[str, ...] = ()
    rank: int | None = 1
    timeout: float | None = None
    max_failures: int = 0
    spark_says: tuple[str, ...] = ()
    last_words: bool = False
    stop_grace_s: float = 1.0


DIED = "rank 1 failed with RankProcessDied: its process ended without reporting a result: "
IN_TASK = DIED + "the rank process of barrier task "
TIMED_OUT = f"the run did not finish within timeout={TIMEOUT_S} s"
LONG_GRACE_S = 120.0
"""A stop grace far longer than the run: a run that spent it on a SIGSTOPped rank would miss its bound."""
EXPECTED: dict[str, Expected] = {
    "none": Expected(None),
    "slow": Expected(None),
    "cut": Expected(None),
    "checkpointed": Expected(None, max_failures=1),
    "raise": Expected(RankFailedError, ("rank 1 failed with ValueError: rank 1 gives up",)),
    "exit": Expected(RankProcessDiedError, (DIED, "exit code 3"), spark_says=(IN_TASK,), last_words=True),
    "sigkill": Expected(
        RankProcessDiedError,
        (DIED, "exit code -9 (killed by SIGKILL)"),
        spark_says=(IN_TASK,),
        last_words=True,
    ),
    "gloo": Expected(RankProcessDiedError, (DIED, "exit code 5"), spark_says=(IN_TASK,), last_words=True),
    "sigstop": Expected(RunTimeoutError, (TIMED_OUT,), None, TIMEOUT_S, stop_grace_s=LONG_GRACE_S),
    "hang": Expected(RunTimeoutError, (TIMED_OUT,), None, TIMEOUT_S),
    # under mpirun both ranks ran under task 0's mpirun, in the JVM that was killed: either may be named
    "executor": Expected(
        RankProcessDiedError,
        (
            "its process ended without reporting a result: the Spark barrier stage failed: Spark executor ",
            "was lost: its JVM was killed with SIGKILL (exit code 137)",
        ),
        None,
    ),
    "cancel": Expected(RunCancelledError, ("(cancelJobGroup)",), None),
}
NEVER_SAYS = ("mpirun noticed", "exit code 137; ", "Primary job")
"""mpirun's own words, which must never stand for the rank's: the same message whatever the launcher."""
SPARK_ONLY = {"executor", "cancel", "cut"}


@dataclass
class Outcome:
    """How one run ended: its value or error, seconds from its start and from its fault, and what was wrong."""

    value: Any
    error: BaseException | None
    seconds: float
    after_fault_s: float | None


class DriverSideFault:
    """In the background: once rank 1 is armed, kill its executor's JVM, cancel the run's Spark job group, or cut
    rank 1's host off from the others for `CUT_S` (`cluster`: the two-host fixture's `NetnsCluster`)."""

    def __init__(self, fault: str, folder: Path, runner: Runner, spark: Any, cluster: Any = None) -> None:
        self._act: Callable[[], None] | None = {
            "executor": lambda: os.kill(executor_jvm_of(rank_pid(1)), signal.SIGKILL),
            "cancel": lambda: spark.sparkContext.cancelJobGroup(_job_group(runner)),
            "cut": lambda: cluster.cut_off(cluster.host_of(rank_pid(1)), CUT_S),
        }.get(fault)
        self._folder = folder
        self._thread = threading.Thread(target=self._when_armed, daemon=True)
        if self._act is not None:
            self._thread.start()

    def _when_armed(self) -> None:
        if poll_until(self._folder.joinpath(ARMED).exists, START_TIMEOUT_S + 60) and self._act is not None:
            self._folder.joinpath("fault-at").write_text(repr(time.monotonic()))
            self._act()

    def join(self) -> None:
        if self._act is not None:
            self._thread.join(timeout=10)


def _job_group(runner: Runner) -> str:
    record = runner.last_run
    assert record is not None and record.spark_job_group is not None, "the run has no Spark job group yet"
    return record.spark_job_group


def run_with_fault(
    fault: str,
    launcher: str,
    np: int,
    folder: Path,
    spark: Any = None,
    checkpoint_dir: str | None = None,
    cluster: Any = None,
) -> Outcome:
    """One run of `faulty_rank(fault)` on `np` ranks (np < 0: the driver's machine); its outcome, not judged."""
    expected = EXPECTED[fault]
    runner = Runner(
        np=np, launcher=cast(LauncherName, launcher), timeout=expected.timeout, stop_grace_s=expected.stop_grace_s, start_timeout=START_TIMEOUT_S,
        max_failures=expected.max_failures, checkpoint_dir=checkpoint_dir, tracking=False, progress=False,
    )  # fmt: skip
    side = DriverSideFault(fault, folder, runner, spark, cluster)
    value: Any = None
    error: BaseException | None = None
    started = time.monotonic()
    try:
        value = runner.run(faulty_rank, fault, str(folder))
    except Exception as exc:
        error = exc
    ended = time.monotonic()
    side.join()
    fault_at = folder / "fault-at"
    after = ended - float(fault_at.read_text()) if fault_at.exists() else None
    return Outcome(value, error, ended - started, after)


def judge(fault: str, outcome: Outcome, in_spark: bool) -> list[str]:
    """What is wrong with `outcome` for `fault` (empty when it is the expected one)."""
    expected = EXPECTED[fault]
    error = outcome.error
    if isinstance(error, AttemptsFailedError) and expected.max_failures == 0 and len(error.errors) == 1:
        error = error.errors[0]
    wrong = []
    if expected.error is None:
        want = (STEPS * (STEPS - 1) * (2 * STEPS - 1) // 6, 1) if fault == "checkpointed" else VALUE
        if error is not None or outcome.value != want:
            wrong.append(f"expected {want!r}, got {outcome.value!r} / {error!r}")
        return wrong
    if type(error) is not expected.error:
        return [f"expected {expected.error.__name__}, got {error!r}"]
    says = (*expected.says, *(expected.spark_says if in_spark else ()))
    wrong += [f"the message does not say {text!r}: {error}" for text in says if text not in str(error)]
    wrong += [f"the message says {text!r}: {error}" for text in NEVER_SAYS if text in str(error)]
    tail = getattr(error, "output_tail", ())[-1:]
    if expected.last_words and tail != (f"rank 1 meets {fault}",):
        wrong.append(f"rank 1's output tail ends {tail}, not with its last words")
    if expected.rank is not None and getattr(error, "rank", None) != expected.rank:
        wrong.append(f"expected rank {expected.rank} named, got {getattr(error, 'rank', None)}: {error}")
    if expected.timeout is not None and outcome.seconds > expected.timeout + TIMEOUT_SLACK_S:
        wrong.append(f"took {outcome.seconds:.1f} s, over timeout + {TIMEOUT_SLACK_S:g} s")
    if expected.timeout is None and (outcome.after_fault_s is None or outcome.after_fault_s > FAULT_END_S):
        wrong.append(f"ended {outcome.after_fault_s} s after the fault, over {FAULT_END_S:g} s")
    return wrong
