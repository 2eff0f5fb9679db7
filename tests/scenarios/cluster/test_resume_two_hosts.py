"""Recovery across two hosts (the multi-host fixture: 2 network-namespace hosts x 2 task slots, Spark
standalone): an executor JVM on one host is SIGKILLed mid-epoch; the next attempt (a new barrier stage of 4
tasks, launcher direct) runs once Spark has brought an executor back, and resumes from the shared checkpoint.
Elastic (`np=(2, 4)`, both launchers): a host's executor is killed while its worker is stopped, so the run
goes on at 2 ranks on the other host; the worker comes back, and the run grows to 4 at its next checkpoint.
(A checkpoint_dir on hosts that share no /tmp: tests/scenarios/cluster/test_shared_storage.py.)"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from tests.helpers import driver_url, leftover_rank_processes
from tests.recovery.elastic_scenario import (
    ExecutorHolder,
    assert_grew_back,
    elastic_fit,
    make_data,
    uninterrupted_run,
)
from tests.recovery.processes import ExecutorKiller, _cmdline
from tests.recovery.test_resume_spark import assert_resumed_at_failing_epoch
from tests.recovery.training import ddp_checkpointed
from tests.scenarios.cluster.fixtures import TwoHosts, registered
from tests.scenarios.cluster.netns_cluster import NetnsCluster

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
    killer = ExecutorKiller(marker, seconds=400)
    results: list[Any] = runner.run_all(ddp_checkpointed, "wait_for_kill", str(marker))
    assert killer.join(), "the executor JVM was never killed"
    assert_resumed_at_failing_epoch(runner, results[0], reference)
    # DDP across the hosts: every rank ends with rank 0's weights, which are an uninterrupted run's
    assert [r["weights"] for r in results] == [reference["weights"]] * two_hosts.slots
    assert leftover_rank_processes(grace_s=5.0) == {}


def test_elastic_run_shrinks_when_a_host_is_lost_and_grows_when_it_returns(
    two_hosts: TwoHosts, tmp_path: Path
) -> None:
    """Placement: Spark barrier stages of 4 (both hosts), 2 (one host), 4 tasks; launcher direct (the same
    scenario on local-cluster: tests/recovery/test_elastic.py)."""
    data = make_data(tmp_path / "data")
    reference = uninterrupted_run(data)
    runner = Runner(
        np=(2, 4), spark=two_hosts.spark, launcher="direct", max_failures=1,
        checkpoint_dir=str(tmp_path / "checkpoints"), start_timeout=180, timeout=480, stop_grace_s=20,
        tracking=False, progress=False,
    )  # fmt: skip
    holder = ExecutorHolder(
        tmp_path, driver_url(two_hosts.spark), worker_of=partial(worker_of, two_hosts.cluster)
    )
    try:
        result = runner.run(elastic_fit, data, str(tmp_path))
    finally:
        holder.join()
        registered(two_hosts.cluster, two_hosts.spark, two_hosts.slots)  # leave the module's session whole
    assert holder.killed_at is not None and holder.held is not None, "no host's worker was held back"
    assert_grew_back(runner, result, reference)
    assert leftover_rank_processes(grace_s=5.0) == {}


def worker_of(cluster: NetnsCluster, executor: int) -> int:
    """The pid of the Spark worker JVM on the host (network namespace) that runs the executor JVM `executor`."""
    for ns in cluster.namespaces:
        pids = cluster.pids_in(ns)
        if executor in pids:
            return next(p for p in pids if "org.apache.spark.deploy.worker.Worker" in _cmdline(p))
    raise AssertionError(f"executor JVM {executor} runs on none of the hosts {cluster.namespaces}")
