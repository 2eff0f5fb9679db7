"""Ranks forked from the barrier task's own Python worker (`sparkrunner/tasks/rank_seeds.py`): a seed becomes the
rank it is given, with that rank's environment, timings and exit code; seeds no rank took are killed; and in a
real Spark run (direct launcher) the ranks are the worker's forks and still see only their own run.

The oracles are the kernel's (/proc: the children of this process, a process's environment as others read it)
and the rank's own interpreter state (its `sys.modules`, its `timeouts`), not sparkrunner's helpers."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from sparkrunner.tasks.rank_seeds import RankSeeds, import_time_variables

ARGV = [sys.executable, "-m", "tests.tasks.seed_child"]


def _children() -> set[int]:
    """This process's live children, read from /proc."""
    found = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        if int(fields[1]) == os.getpid() and fields[0] != b"Z":
            found.add(int(entry))
    return found


def _rank_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "SPARKRUNNER_ATTEMPT_ID": "seed-test-attempt", **extra}


def test_a_seed_becomes_the_rank_it_is_given_with_its_environment_and_exit_code() -> None:
    """The rank's environment is far larger than the room the forking process's has in /proc: its identity is
    shown there all the same."""
    seeds = RankSeeds(1, import_time_variables(os.environ))
    try:
        rank = seeds.take([*ARGV, "3"], _rank_env(A_LARGE_VALUE="x" * 100_000), echo_to=None)
        assert rank is not None
        assert rank.wait(60) == 3
    finally:
        seeds.close()
    said = rank.output_tail()
    assert f"pid={rank.pid} ppid={os.getpid()}" in said, said
    assert "tasks_loaded=False" in said, f"a rank loads no task-side module, even forked from a task: {said}"
    assert "attempt_in_proc=True" in said, f"a sweep reading /proc must find the rank by its attempt: {said}"


def test_a_timing_the_rank_overrides_is_imported_under_the_rank_s_value() -> None:
    """The seed imported sparkrunner under the task's timings; the rank's own override must win."""
    seeds = RankSeeds(1, import_time_variables(os.environ))
    try:
        rank = seeds.take([*ARGV, "0"], _rank_env(SPARKRUNNER_RESULT_ACK_TIMEOUT_S="7.5"), echo_to=None)
        assert rank is not None
        assert rank.wait(60) == 0
    finally:
        seeds.close()
    assert "ack=7.5" in rank.output_tail(), rank.output_tail()


def test_a_task_s_seeds_each_become_a_rank_while_the_other_runs(tmp_path: Path) -> None:
    """Two ranks in one task (`ranks_per_task=2`), the second waiting for the first: the second seed must not
    hold the first one's control pipe, or the first would wait for its request's end as long as the second runs."""
    marker = str(tmp_path / "first-rank-ran")
    seeds = RankSeeds(2, import_time_variables(os.environ))
    try:
        first = seeds.take([*ARGV, "4"], _rank_env(SEED_TEST_TOUCH=marker), echo_to=None)
        second = seeds.take([*ARGV, "5"], _rank_env(SEED_TEST_WAIT_FOR=marker), echo_to=None)
        assert first is not None and second is not None
        assert (first.wait(60), second.wait(60)) == (4, 5), "9: the second rank never saw the first one run"
    finally:
        seeds.close()


def test_seeds_no_rank_took_are_killed_when_the_task_ends() -> None:
    before = _children()
    seeds = RankSeeds(2, {})
    forked = _children() - before
    assert len(forked) == 2
    seeds.close()
    assert not forked & _children()
    assert seeds.take([*ARGV, "0"], _rank_env(), echo_to=None) is None, "no seed left: the rank starts cold"


def _what_the_rank_is() -> dict[str, Any]:
    forked = "pyspark.context" in sys.modules  # (before this function imports pyspark) the worker's modules
    from pyspark import BarrierTaskContext

    import sparkrunner

    with open("/proc/self/environ", "rb") as f:
        environ = f.read()
    context = BarrierTaskContext.get()
    return {
        "forked from the worker": forked,
        "rank": sparkrunner.rank_context().rank,
        "partition": context.partitionId(),
        "gathered": context.allGather(str(sparkrunner.rank_context().rank)),
        "attempt in /proc": f"SPARKRUNNER_ATTEMPT_ID={os.environ['SPARKRUNNER_ATTEMPT_ID']}".encode()
        in environ,
        "task modules": sorted(n for n in sys.modules if n.startswith("sparkrunner") and ".tasks" in n),
        "command line": open("/proc/self/cmdline", "rb").read().split(b"\0"),
    }


@pytest.mark.spark
def test_a_direct_spark_run_s_ranks_are_forks_of_their_task_s_worker(spark_local: Any) -> None:
    """Placement: Spark local[2], np=2, launcher direct, no zygote (a run that cannot start again): each rank is
    a fork of its barrier task's Python worker (pyspark's worker modules are in it), answers
    `BarrierTaskContext.get()` for its own task (not the worker's), and is found in /proc by its attempt and its
    command line (in Spark 3.5's environment too, whose workers' command line is shorter)."""
    ranks = Runner(np=2, launcher="direct", tracking=False).run_all(_what_the_rank_is)
    for rank, seen in enumerate(ranks):
        assert seen["forked from the worker"], seen
        assert seen["rank"] == seen["partition"] == rank, seen
        assert seen["gathered"] == ["0", "1"], seen
        assert seen["attempt in /proc"], seen
        assert seen["task modules"] == [], seen
        assert b"sparkrunner.ranks.bootstrap" in seen["command line"], seen
