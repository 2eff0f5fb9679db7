"""The facts of a run's Spark barrier stage that a rank's `BarrierTaskContext.get()` answers from.

A barrier task gathers them (its own Spark context, every task's `SparkTask` from the address exchange) and
hands them to its ranks as one JSON environment variable (`Env.BARRIER_STAGE`), the same for every rank, so
that mpirun, which gives all ranks one environment, carries them too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sparkrunner.channel.messages import SparkTask


@dataclass(frozen=True)
class BarrierStage:
    """One barrier stage as Spark describes it to its tasks, with every task's own facts in partition order."""

    stage_id: int
    cpus: int
    cpu_amount: str | None
    """`TaskContext.cpuAmount()` as a decimal string (pyspark >= 4), None where pyspark has no such method."""
    local_properties: dict[str, str]
    addresses: list[str]
    """`getTaskInfos()[i].address` of every task, in partition order."""
    tasks: list[SparkTask]

    def to_json(self) -> str:
        import json  # (here: a rank's start does not need it)

        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BarrierStage:
        import json

        data = json.loads(text)
        tasks = [SparkTask(**task) for task in data.pop("tasks")]
        return cls(**data, tasks=tasks)
