"""What a run hands every process that starts its ranks (the driver's placement, the barrier tasks, their
launchers): the rank job, with the zygote it may fork from, and how a task's processes ended."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sparkrunner.common.checks import PortRange
from sparkrunner.topology import RankIndex, TaskIndex


@dataclass(frozen=True)
class ZygoteSpec:
    """What a barrier task needs to start or reach its executor's zygote for a run."""

    lease_id: str
    """The id of the run's zygote lease, in the zygote's environment (`Env.ZYGOTE_LEASE_ID`): the lease's sweep
    finds its zygotes by it, and no attempt's sweep does."""
    key: bytes
    lease: tuple[str, int]
    """The driver's lease server: the zygote stays connected and ends when it closes."""
    modules: tuple[str, ...]
    warm: tuple[str, ...] = ()
    """Modules it imports later, once idle (`WARM_LATER`): the first attempt's ranks do not wait for them."""
    socket: str | None = None
    """The socket of a zygote the driver keeps (np < 0): ranks connect there, and nothing starts one."""
    run_id: str = ""
    """The run's id, which an executor's zygote carries as every process of the run does."""


@dataclass(frozen=True)
class RankJob:
    """What a rank needs to find the driver; travels to the barrier tasks inside the Spark closure."""

    attempt_id: str
    """The attempt's id (`Attempt.id`), which every process of the attempt carries: how its leftovers are found."""
    driver: tuple[str, int]
    secret: bytes
    user_env: dict[str, str] = field(default_factory=dict)
    uses_horovod: bool | None = None
    """`Runner(horovod=...)`: whether to host Horovod's Gloo rendezvous (`frameworks.horovod_env.hosts_rendezvous`)."""
    use_gpu: bool | None = None
    """`Runner(use_gpu=...)`: None pins each rank to its task's GPUs and warns about unused ones."""
    ranks_per_task: int = 1
    """Ranks each barrier task starts; the topology holds one peer per rank, task by task."""
    port_range: PortRange | None = None
    """Where every port sparkrunner opens must come from (firewalls, network policies); None: anywhere."""
    run_id: str = field(default="", kw_only=True)
    """The run's id (`RunRecord.run_id`), which every process of the run carries."""
    barrier_stage: str | None = None
    """Set by the barrier task: its stage's facts (`BarrierStage` JSON) for the ranks' `BarrierTaskContext`."""
    task_times: tuple[float, float] | None = None
    """Set by the barrier task: when it began and when its addresses were exchanged (`time.monotonic()`), which
    its ranks send on in their `RankLaunch`."""
    zygote: ZygoteSpec | None = None
    """Set for direct Spark runs that may start again (`max_failures`, an np range): ranks fork from their
    executor's zygote; and for direct np < 0 runs that start warm: ranks fork from the driver's."""
    echo_output: bool = True
    """Set by the Spark placement: whether a barrier task's ranks also write their output to the executor's own
    stdout/stderr (its log) besides relaying it; False where that is the driver's console (a local master), which
    would show every line twice."""


@dataclass(frozen=True)
class TaskOutcome:
    """How a barrier task's rank process(es) ended."""

    exit_code: int
    output_tail: str


ReportFailure = Callable[[TaskOutcome], None]
"""How a task's launcher tells the driver at once that one of the task's processes failed."""


def barrier_task_of(job: RankJob, index: RankIndex) -> TaskIndex:
    """The index of the barrier task that runs the rank at `index` (tasks hold `ranks_per_task` ranks each)."""
    return TaskIndex(index // job.ranks_per_task)
