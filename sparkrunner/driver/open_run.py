"""One run once its checks passed, as the run's controller carries it from attempt to attempt (`OpenRun`): what
every attempt shares, what the caller reads of the run (`RunOutputs`), and each placed attempt (`Placed`). Each
run has its own, so that runs from several threads never share state."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sparkrunner.common.checkpoint_dir import RunCheckpoints, latest_step
from sparkrunner.common.rank_job import RankJob
from sparkrunner.driver.attempt.attempt_channel import AttemptChannel
from sparkrunner.driver.elastic import Sizing
from sparkrunner.driver.retry_policy import RecoveryOptions, resume_text
from sparkrunner.driver.supervisor import RunDeadline
from sparkrunner.driver.zygotes import Zygotes
from sparkrunner.launch import Launcher
from sparkrunner.observe.observers import AttemptRecord, Observers, RunRecord
from sparkrunner.options import RunOptions
from sparkrunner.placement import Placement
from sparkrunner.placement.slots import session_slots, wait_for_slots
from sparkrunner.placement.spark import job_description
from sparkrunner.timeouts import SLOTS_POLL_S

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunCall:
    """What a run runs on every rank: ``main(*args, **kwargs)``; `every_rank`: return every rank's value."""

    main: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    name: str
    every_rank: bool


@dataclass
class RunOutputs:
    """What a caller reads after a run: its record (set as the run opens) and the files its ranks sent."""

    last_run: RunRecord | None = None
    received_files: dict[str, str] = field(default_factory=dict)


@dataclass
class OpenRun:
    """What every attempt of one run shares, from its checks on."""

    call: RunCall
    outputs: RunOutputs
    payload: bytes
    launcher: Launcher
    spark: Any
    ranks_per_task: int
    sizing: Sizing
    deadline: RunDeadline | None
    observers: Observers
    record: RunRecord
    checkpoints: RunCheckpoints
    env: dict[str, str]
    zygotes: Zygotes | None

    @property
    def attempt(self) -> AttemptRecord:
        """The record of the attempt in flight (or the last to end): its number, id and np."""
        return self.record.attempts[-1]

    @property
    def np(self) -> int:
        """The np of the attempt in flight (0 before it has one)."""
        return self.attempt.world_size or 0

    def job_description(self) -> str:
        """The barrier job of the attempt in flight, in Spark's UI."""
        run, later = self.record, self.attempt.attempt_id if self.attempt.number else ""
        return job_description(run.function, run.np, run.launcher, run.run_id, run.mlflow_run_id, later)

    def start_attempt(self, number: int) -> AttemptRecord:
        """The record of attempt `number` as it starts: what `last_run.attempts`, MLflow and the report read."""
        resumed = latest_step(self.checkpoints.folder) if number else None
        attempt_id = AttemptRecord.id_for(self.record.run_id, number)
        record = AttemptRecord(number, time.time(), resumed_from_step=resumed, attempt_id=attempt_id)
        self.record.attempts.append(record)
        if number:
            log.info(f"attempt {number} started{resume_text(resumed)}")
        return record

    def slots(self) -> int | None:
        """The cluster's task slots now; None without Spark, or when the cluster does not say."""
        return None if self.spark is None else session_slots(self.spark)

    def np_for(self, number: int, start_timeout: float) -> int:
        """The np of attempt `number`, the scaling policy's once the run waited for max slots as long as the
        policy says, then (up to `start_timeout`) for min."""
        sizing = self.sizing
        if not sizing.elastic:
            return sizing.np_for(number, None)
        deadline = time.monotonic() + sizing.patience_s(number)
        while sizing.ranks_in(self.slots()) < sizing.np and time.monotonic() < deadline:
            time.sleep(SLOTS_POLL_S)
        if sizing.ranks_in(self.slots()) < sizing.least:
            wait_for_slots(self.spark.sparkContext, sizing.least // self.ranks_per_task, start_timeout)
        return sizing.np_for(number, self.slots())

    def failed_before(self) -> int:
        """How many attempts before the last one failed (a resize is no failure): their records say."""
        return sum(1 for attempt in self.record.attempts[:-1] if attempt.error is not None)

    def job(
        self, placement: Placement, channel: AttemptChannel, options: RunOptions, recovery: RecoveryOptions
    ) -> RankJob:
        """What every rank of the attempt in flight is given: where the driver is, its secret, its environment."""
        zygote = None
        if self.zygotes is not None:
            zygote = self.zygotes.spec(placement.bind_host, placement.driver_host, options)
        return RankJob(
            self.attempt.attempt_id,
            (placement.driver_host, channel.port),
            channel.secret,
            {**self.env, **recovery.rank_env(self.attempt.number)},
            options.horovod,
            options.use_gpu,
            port_range=options.port_range,
            ranks_per_task=self.ranks_per_task,
            zygote=zygote,
            run_id=self.record.run_id,
        )

    def close(self) -> None:
        self.checkpoints.close()
        if self.zygotes is not None:
            self.zygotes.close()


@dataclass(frozen=True)
class Placed:
    """An attempt ready to run (its record is its run's last): where its ranks start, the channel they reach, and
    the job they are given (the attempt's id with it)."""

    placement: Placement
    channel: AttemptChannel
    job: RankJob
