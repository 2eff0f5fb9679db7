"""`pyspark.BarrierTaskContext.get()` inside a rank of a Spark run (np > 0), as in the barrier task itself.

The user's function runs in a rank process (a child of the barrier task's Python worker, or of mpirun), not in
Spark's Python worker, so pyspark has no task context there and `BarrierTaskContext.get()` raises
``[NOT_IN_BARRIER_STAGE]``. Once such a rank imports pyspark, its task context becomes a `BarrierTaskContext`
of the rank's own barrier task, read from the stage's facts its task handed over (`Env.BARRIER_STAGE`):
`partitionId`, `stageId`, `attemptNumber`, `taskAttemptId`, `cpus`, `resources`, `getLocalProperty` and
`getTaskInfos` answer as in the task. `barrier()` and `allGather()` go to the driver on the rank's own
connection (`sparkrunner.driver.attempt.barrier_gate`) instead of Spark's coordinator, which only knows the tasks.

Every rank takes part: with several ranks per task (`ranks_per_task`), `barrier()` waits for every rank and
`allGather()` returns one message per rank, in partition order and then rank order. With np < 0 there is no
barrier task, nothing is installed, and pyspark's own ``[NOT_IN_BARRIER_STAGE]`` error stands.
"""

from __future__ import annotations

import functools
import os
import queue
import threading
from types import ModuleType
from typing import Any

from sparkrunner.channel import messages as m
from sparkrunner.channel.barrier_stage import BarrierStage
from sparkrunner.common.environment import Env
from sparkrunner.errors import BarrierSyncTimeoutError, ChannelError
from sparkrunner.frameworks.after_import import after_import
from sparkrunner.ranks import api as rank
from sparkrunner.timeouts import BARRIER_SYNC_TIMEOUT_S, ENV_PREFIX
from sparkrunner.topology import Topology

_releases: queue.Queue[m.BarrierRelease] = queue.Queue()
_calls = threading.Lock()  # one barrier call at a time per rank, as Spark's own
_next_round = [0]


def install_on_import() -> None:
    """In a rank started by a barrier task: answer `BarrierTaskContext.get()` once (and if) pyspark is imported."""
    text = os.environ.get(Env.BARRIER_STAGE)
    if text:
        after_import("pyspark.taskcontext", functools.partial(_install, BarrierStage.from_json(text)))


def new_run() -> None:
    """A new run begins in this rank (a warm session's ranks serve several): its barrier rounds count from 0."""
    with _calls:
        _next_round[0] = 0
        while not _releases.empty():
            _releases.get_nowait()


def deliver(release: m.BarrierRelease) -> None:
    """The driver released a barrier round (called by the thread that reads the driver's messages)."""
    _releases.put(release)


def gather(partition: int, message: str) -> list[str]:
    """Wait until every rank of the run made this call; every rank's message, in partition order."""
    with _calls:
        round_ = _next_round[0]
        _next_round[0] += 1
        if not rank.send_to_driver(m.BarrierJoin(round_, partition, message)):
            raise ChannelError(
                "BarrierTaskContext.barrier()/allGather() needs the run's driver, which is gone"
            )
        try:
            release = _releases.get(timeout=BARRIER_SYNC_TIMEOUT_S)
        except queue.Empty:
            raise BarrierSyncTimeoutError(
                f"BarrierTaskContext.barrier()/allGather() call {round_ + 1} waited {BARRIER_SYNC_TIMEOUT_S:g} s "
                "for the other ranks: every rank must make the same number of barrier()/allGather() calls "
                f"(a longer wait: {ENV_PREFIX}BARRIER_SYNC_TIMEOUT_S)"
            ) from None
    if release.round != round_:
        raise ChannelError(f"barrier round {release.round} released while this rank waits in round {round_}")
    return release.messages


def _partition() -> int:
    """This rank's barrier task: from mpirun's topology (any task's mpirun may start it), else the task that
    started it."""
    encoded = os.environ.get(Env.TOPOLOGY)
    if encoded:
        return int(Topology.from_json(encoded).peers[rank.rank_context().rank].task)
    return int(os.environ[Env.STARTED_BY_TASK])


def _install(stage: BarrierStage, taskcontext: ModuleType) -> None:
    """Make pyspark's task context, in this process, the barrier task context of this rank's task."""
    context: Any = object.__new__(_context_class(taskcontext))
    partition = _partition()
    task = stage.tasks[partition]
    facts: dict[str, Any] = {
        "stageId": stage.stage_id,
        "partitionId": partition,
        "attemptNumber": task.attempt_number,
        "taskAttemptId": task.task_attempt_id,
        "cpus": stage.cpus,
        "localProperties": dict(stage.local_properties),
        "resources": {
            name: taskcontext.ResourceInformation(name, addresses)
            for name, addresses in task.resources.items()
        },
        "addresses": list(stage.addresses),
    }
    if stage.cpu_amount is not None:
        from decimal import Decimal  # (here: a rank's start does not need it)

        facts["cpuAmount"] = Decimal(stage.cpu_amount)
    for name, value in facts.items():
        setattr(context, f"_{name}", value)
    taskcontext.TaskContext._taskContext = context
    taskcontext.BarrierTaskContext._taskContext = context


@functools.cache
def _context_class(taskcontext: ModuleType) -> type:
    """pyspark's `BarrierTaskContext`, its barrier calls served by the run's driver."""

    class RankBarrierTaskContext(taskcontext.BarrierTaskContext):  # type: ignore[name-defined]
        """The barrier task context of a sparkrunner rank: the rank's task's facts, barriers across all ranks."""

        _addresses: list[str]

        def barrier(self) -> None:
            gather(self.partitionId(), "")

        def allGather(self, message: str = "") -> list[str]:
            if not isinstance(message, str):
                raise TypeError("Argument `message` must be of type `str`")
            return gather(self.partitionId(), message)

        def getTaskInfos(self) -> list[Any]:
            return [taskcontext.BarrierTaskInfo(address) for address in self._addresses]

    return RankBarrierTaskContext
