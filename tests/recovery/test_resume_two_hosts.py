"""Recovery across two hosts (the multi-host fixture: 2 network-namespace hosts x 2 task slots, Spark
standalone): an executor JVM on one host is SIGKILLed mid-epoch; the next attempt (a new barrier stage of 4
tasks, launcher direct) runs once Spark has brought an executor back, and resumes from the shared checkpoint."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from tests.cluster.fixtures import TwoHosts
from tests.helpers import leftover_rank_processes
from tests.recovery.processes import executor_jvm_of, rank_pid
from tests.recovery.test_resume_spark import assert_resumed_at_failing_epoch
from tests.recovery.training import ddp_checkpointed

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


def test_ddp_on_two_hosts_resumes_after_an_executor_jvm_is_killed(
    two_hosts: TwoHosts, tmp_path: Path
) -> None:
    reference = Runner(np=-4, launcher="direct", tracking=False, progress=False).run(ddp_checkpointed)
    marker = tmp_path / "rank1-waits"
    runner = Runner(
        np=two_hosts.slots,
        spark=two_hosts.spark,
        launcher="direct",
        max_failures=1,
        checkpoint_dir=str(tmp_path / "checkpoints"),  # one file system for both namespace hosts: shared
        start_timeout=240,
        timeout=600,
        tracking=False,
        progress=False,
    )
    killed: list[int] = []

    def kill_when_waiting() -> None:
        deadline = time.monotonic() + 400
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        jvm = executor_jvm_of(rank_pid(1))
        os.kill(jvm, signal.SIGKILL)
        killed.append(jvm)

    killer = threading.Thread(target=kill_when_waiting, daemon=True)
    killer.start()
    result: Any = runner.run(ddp_checkpointed, "wait_for_kill", str(marker))
    killer.join(timeout=5)
    assert killed, "the executor JVM was never killed"
    assert_resumed_at_failing_epoch(runner, result, reference)
    assert leftover_rank_processes(grace_s=5.0) == {}
