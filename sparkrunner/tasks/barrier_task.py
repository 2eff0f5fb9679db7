"""The code that runs inside each Spark barrier task: exchange addresses, then hand over to the launcher.

Kept free of driver-side imports: it is unpickled and run by executor Python workers.
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from collections.abc import Iterable, Iterator

from sparkrunner.channel.barrier_stage import BarrierStage
from sparkrunner.channel.messages import RankAddress, SparkTask, TaskReport
from sparkrunner.common.rank_job import RankJob, TaskOutcome
from sparkrunner.launch import Launcher
from sparkrunner.system import gpus, processes
from sparkrunner.system.network import hold_ports, own_ports, peer_address
from sparkrunner.tasks import address_exchange, task_report
from sparkrunner.tasks.launchers import TASK_SIDES
from sparkrunner.tasks.rank_seeds import RankSeeds, can_seed, import_time_variables
from sparkrunner.tasks.stopped_ranks import StoppedRanksWatch
from sparkrunner.timeouts import LEFTOVER_GRACE_S
from sparkrunner.topology import Peer, RankIndex, TaskIndex, Topology


def _task_gpus(ctx: object) -> tuple[str, ...]:
    """This task's GPUs as CUDA device ids (Spark's addresses mapped through the executor's own list)."""
    resources = ctx.resources()  # type: ignore[attr-defined]
    gpu = resources.get("gpu")
    addresses = tuple(gpu.addresses) if gpu is not None else ()
    return gpus.device_ids(addresses, os.environ.get(gpus.CUDA_VISIBLE))


def _spark_task(ctx: object) -> SparkTask:
    """What Spark told this task about itself, for `BarrierTaskContext.get()` in every rank of the run."""
    resources = ctx.resources()  # type: ignore[attr-defined]
    return SparkTask(
        ctx.taskAttemptId(),  # type: ignore[attr-defined]
        ctx.attemptNumber(),  # type: ignore[attr-defined]
        {name: list(info.addresses) for name, info in resources.items()},
    )


def _barrier_stage(ctx: object, tasks: list[SparkTask]) -> BarrierStage:
    """The stage as this task's Spark context describes it, plus every task's own facts."""
    cpu_amount = getattr(ctx, "cpuAmount", None)  # pyspark >= 4
    return BarrierStage(
        ctx.stageId(),  # type: ignore[attr-defined]
        ctx.cpus(),  # type: ignore[attr-defined]
        str(cpu_amount()) if cpu_amount is not None else None,
        dict(getattr(ctx, "_localProperties", None) or {}),  # no public way to list them all
        [info.address for info in ctx.getTaskInfos()],  # type: ignore[attr-defined]
        tasks,
    )


def exchange_topology(
    ctx: object, ports_per_rank: int, job: RankJob, ports: tuple[int, ...]
) -> tuple[Topology, RankIndex, BarrierStage]:
    """Every task learns every rank's address, reserved ports (`ports`: those this task holds for its ranks)
    and GPUs (through the driver, see `address_exchange`), and every task's Spark facts; returns the topology
    (one peer per rank, task by task), this task's first rank and the barrier stage as the ranks'
    `BarrierTaskContext.get()` describes it."""
    index = ctx.partitionId()  # type: ignore[attr-defined]
    infos = ctx.getTaskInfos()  # type: ignore[attr-defined]
    spark_host = infos[index].address.rsplit(":", 1)[0]
    host = peer_address(spark_host, job.driver[0])
    per_task = job.ranks_per_task
    split = split_gpus(_task_gpus(ctx), per_task)
    mine = [
        RankAddress(host, tuple(ports[j * ports_per_rank : (j + 1) * ports_per_rank]), tuple(split[j]))
        for j in range(per_task)
    ]
    gathered = address_exchange.exchange(job.driver, job.secret, index, len(infos), _spark_task(ctx), mine)
    peers = tuple(
        Peer(p.host, p.ports, p.gpus, TaskIndex(task))
        for task, ranks in enumerate(gathered.tasks)
        for p in ranks
    )
    return Topology(peers), RankIndex(index * per_task), _barrier_stage(ctx, gathered.spark)


def split_gpus(task_gpus: tuple[str, ...], ranks: int) -> list[tuple[str, ...]]:
    """The task's GPUs shared out evenly among its ranks (one each when they match); all to each otherwise."""
    if len(task_gpus) % ranks != 0:
        return [task_gpus] * ranks
    share = len(task_gpus) // ranks
    return [task_gpus[j * share : (j + 1) * share] for j in range(ranks)]


def run_barrier_task(job: RankJob, launcher: Launcher) -> Iterator[dict[str, object]]:
    """Body of one barrier task; yields one record describing how this task's ranks ended."""
    entered = time.monotonic()
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    index = ctx.partitionId()
    seeds = RankSeeds(_seeds_wanted(job, launcher), import_time_variables({**os.environ, **job.user_env}))
    try:
        # held until this task's ranks have ended, so no other process takes one before its rank listens
        with hold_ports(
            launcher.ports_per_rank * job.ranks_per_task, own_ports(job.port_range), slot=index
        ) as held:
            record = _run_task(ctx, job, launcher, held.ports, entered, seeds)
    finally:
        seeds.close()
    yield record


def _seeds_wanted(job: RankJob, launcher: Launcher) -> int:
    """Seeds to fork when the task begins (`tasks.rank_seeds`): one per rank when the task starts its ranks itself
    and no executor zygote forks them."""
    starts_own = launcher.name == "direct" and job.zygote is None
    return job.ranks_per_task if starts_own and can_seed() else 0


def _run_task(
    ctx: object, job: RankJob, launcher: Launcher, ports: tuple[int, ...], entered: float, seeds: RankSeeds
) -> dict[str, object]:
    """Exchange addresses, run this task's part of the launch (its ranks from `seeds` where there are), and say
    how its ranks ended (`entered`: when the task began, for its ranks' launch times)."""
    topology, first, stage = exchange_topology(ctx, launcher.ports_per_rank, job, ports)
    job = dataclasses.replace(job, barrier_stage=stage.to_json(), task_times=(entered, time.monotonic()))
    index = ctx.partitionId()  # type: ignore[attr-defined]
    host = topology.peers[first].host
    reported: list[TaskOutcome] = []

    def report_failure(outcome: TaskOutcome) -> None:
        """Tell the driver how this task's (first failed) process ended; once."""
        if not reported:
            reported.append(outcome)
            failure = TaskReport(
                index, host, launcher.name, exit_code=outcome.exit_code, tail=outcome.output_tail
            )
            task_report.send(job.driver, job.secret, failure)

    watch = StoppedRanksWatch(job.driver, job.secret, job.attempt_id, index)
    try:
        outcome = TASK_SIDES[launcher.name](job, topology, first, report_failure, seeds)
    except BaseException:
        failure = TaskReport(index, host, launcher.name, traceback=traceback.format_exc())
        task_report.send(job.driver, job.secret, failure)
        raise
    finally:
        watch.close()
        # only this task's processes: another task's ranks on this machine may still be running
        # short grace: the rank (or mpirun) has ended; what is left is a daemon it left behind
        leftover = processes.sweep_attempt(job.attempt_id, task=index, grace_s=LEFTOVER_GRACE_S)
    if outcome.exit_code != 0:
        report_failure(outcome)
    return {"index": index, "exit_code": outcome.exit_code, "tail": outcome.output_tail, "swept": leftover}


def barrier_partition_fn(job: RankJob, launcher: Launcher):  # type: ignore[no-untyped-def]
    def run(_: Iterable[object]) -> Iterator[dict[str, object]]:
        return run_barrier_task(job, launcher)

    return run
