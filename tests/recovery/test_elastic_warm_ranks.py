"""A retried attempt starts its ranks warm: on real Spark (the local-cluster[2,2,1024] session of
test_elastic.py), launcher direct, np=4 (every slot, so both executors host ranks in both attempts),
`max_failures=1`, rank 1 fails in attempt 0. Every rank of both attempts is forked by its executor's zygote
(`sparkrunner.ranks.zygote`, leased by `sparkrunner.driver.zygotes`): attempt 1's ranks are new processes whose
parent is the zygote that forked attempt 0's ranks on the same executor, with torch already imported.
Oracles: what each rank reads of itself and its parent in /proc, and the process table after the run.

The zygote leaves nothing in its executor's temp dir (a soak run found it did, 2026-11-27): not its sockets' folder, not
torch's inductor cache folder (made by its later import of torch._dynamo, once idle). Oracle: the test's own
listing of a temp dir the executors' Python workers get for that run alone (`SparkContext.environment`, which
starts new ones)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from sparkrunner import Runner
from tests.conftest import spark_session
from tests.helpers import rank_processes
from tests.recovery.test_elastic import MASTER, four_slots
from tests.waiting import poll_until, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _stat(pid: int | str) -> list[str]:
    """/proc/PID/stat's fields after the command name (field 3 first)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def record_and_fail_once(folder: str) -> int:
    """Each rank writes its pid, parent, start time and the parent's; rank 1 fails in attempt 0."""
    warm = "torch" in sys.modules  # before this function imports it: the zygote had
    import torch

    import sparkrunner

    ctx = sparkrunner.rank_context()
    attempt = int(os.environ["SPARKRUNNER_ATTEMPT"])
    parent = os.getppid()
    with open(f"/proc/{parent}/environ", "rb") as f:
        parent_env = f.read().split(b"\0")
    parent_run = [e for e in parent_env if e.startswith(b"SPARKRUNNER_ZYGOTE_LEASE_ID=")]
    executor = [e for e in parent_env if e.startswith(b"SPARKRUNNER_ZYGOTE_WATCH=")]  # its Python daemon
    facts = {
        "pid": os.getpid(), "ppid": parent, "start": int(_stat("self")[19]),
        "parent_start": int(_stat(parent)[19]), "parent_run": [e.decode() for e in parent_run],
        "executor": [e.decode() for e in executor],
        "warm": warm, "torch_works": float(torch.ones(3).sum()) == 3.0,
    }  # fmt: skip
    Path(folder, f"attempt{attempt}-rank{ctx.rank}.json").write_text(json.dumps(facts))
    if attempt == 0 and ctx.rank == 1:  # once the others have written (their stop would otherwise come first)
        others = [Path(folder, f"attempt0-rank{r}.json") for r in range(ctx.world_size) if r != 1]
        poll_until(lambda: all(p.exists() for p in others), 120)
        raise RuntimeError("rank 1 fails in attempt 0")
    return attempt


def test_a_retried_attempt_forks_its_ranks_from_the_same_zygotes(tmp_path: Path) -> None:
    """Placement: Spark barrier stages of 4 tasks, twice; launcher direct."""
    spark: Any = spark_session(MASTER)
    four_slots(spark)
    runner = Runner(
        np=4, launcher="direct", max_failures=1, checkpoint_dir=str(tmp_path / "checkpoints"),
        start_timeout=180, timeout=300, tracking=False, progress=False,
    )  # fmt: skip
    assert runner.run(record_and_fail_once, str(tmp_path)) == 1
    run_id = runner.last_run.run_id  # type: ignore[union-attr]
    facts = {
        (a, r): json.loads((tmp_path / f"attempt{a}-rank{r}.json").read_text())
        for a in (0, 1)
        for r in range(4)
    }
    zygotes = {tuple(f["executor"]): (f["ppid"], f["parent_start"]) for (a, _), f in facts.items() if a == 0}
    assert len(zygotes) == 2, f"one zygote per executor in attempt 0: {facts}"
    first = [facts[(0, r)] for r in range(4)]
    for (attempt, rank), fact in facts.items():
        assert fact["warm"] and fact["torch_works"], f"attempt {attempt} rank {rank} started cold: {fact}"
        assert fact["parent_run"] == [f"SPARKRUNNER_ZYGOTE_LEASE_ID={run_id}-zygote"], fact
        if attempt == 1:
            assert zygotes.get(tuple(fact["executor"])) == (fact["ppid"], fact["parent_start"]), (
                f"not forked by attempt 0's zygote of its executor: {facts}"
            )
            assert all(fact["pid"] != f["pid"] or fact["start"] != f["start"] for f in first)
            assert fact["start"] >= max(f["start"] for f in first)
    assert poll_until(lambda: not rank_processes(run_id), 5), f"left behind: {rank_processes(run_id)}"


def temp_dir_after_zygote_warmed() -> tuple[bool, str, str]:
    """Once torch's inductor cache folder appears under the rank's TMPDIR (made by the zygote's later import of
    torch._dynamo, once it is idle; tests/conftest.py keeps an inherited TORCHINDUCTOR_CACHE_DIR from placing it
    elsewhere): whether a zygote forked this rank, its temp dir, and the TMPDIR it was given."""
    import glob

    import torch

    torch.ones(1)
    temp = os.environ["TMPDIR"]
    inductor = os.path.join(temp, "**", "torchinductor_*")
    wait_until(lambda: glob.glob(inductor, recursive=True), 60, "the zygote's import of torch._dynamo")
    with open(f"/proc/{os.getppid()}/environ", "rb") as f:
        forked = any(e.startswith(b"SPARKRUNNER_ZYGOTE_LEASE_ID=") for e in f.read().split(b"\0"))
    return forked, tempfile.gettempdir(), temp


def test_the_zygote_leaves_nothing_in_its_executor_s_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Placement: a Spark barrier stage of 2 tasks, launcher direct, `max_failures=1` (its ranks fork from the
    executors' zygotes); a temp dir short enough for the zygotes' sockets to go in it."""
    spark: Any = spark_session(MASTER)
    four_slots(spark)
    executor_temp = tempfile.mkdtemp(prefix="zygote-temp-", dir="/tmp")
    monkeypatch.setitem(spark.sparkContext.environment, "TMPDIR", executor_temp)
    try:
        runner = Runner(
            np=2, launcher="direct", max_failures=1, checkpoint_dir=str(tmp_path / "checkpoints"),
            start_timeout=180, timeout=300, tracking=False, progress=False,
        )  # fmt: skip
        ranks = runner.run_all(temp_dir_after_zygote_warmed)
        run_id = runner.last_run.run_id  # type: ignore[union-attr]
        assert all(forked for forked, _, _ in ranks), f"a rank started cold: {ranks}"
        assert all(seen == given == executor_temp for _, seen, given in ranks), (
            f"a forked rank's temp dir is not its task's, as a cold rank's is: {ranks}"
        )
        assert poll_until(lambda: not rank_processes(run_id), 10), f"left behind: {rank_processes(run_id)}"
        left = sorted(os.listdir(executor_temp))
        assert not left, f"the zygotes left in {executor_temp}: {left}"
    finally:
        shutil.rmtree(executor_temp, ignore_errors=True)
