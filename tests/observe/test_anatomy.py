"""Step anatomy and straggler warnings with 4 real ranks: torch DDP over Gloo on Spark (`local-cluster[2,1,1024]`,
2 ranks per barrier task, the suite's shared session) and on the driver (np < 0), each through one launcher, and
a healthy Horovod run on the driver; and the steps of sparkrunner's own loaders with 2 ranks. The placement
changes where a rank is said to run (its executor and barrier task, or the driver) and the table's executor
column; the framework changes which collective is timed (DDP's hook, Horovod's synchronize); the launcher
changes nothing of the anatomy (the ranks send their timings over the run's channel), so each case runs once.

Slowness is injected with sleeps well above the noise of a loaded machine (a 40 ms step against 30 ms ones), so
what is checked is behaviour under a known gap. Where a rank runs is checked against its working folder: under
local-cluster, an executor's is named by its id."""

from __future__ import annotations

import logging
import socket
import warnings
from pathlib import Path
from typing import Any

import mlflow
import pytest

from sparkrunner import Runner, StragglerWarning
from tests.matrix import LAUNCHERS, Placement

STEP_S = 0.03
EXTRA_S = 0.01  # +33% of the step's own time, in compute or in the data wait


def ddp_steps(steps: int, slow_rank: int, part: str) -> tuple[str, list[float]]:
    """DDP training whose `slow_rank` computes (or waits for its data) EXTRA_S longer each step; it also
    reports progress every step, which must not count the steps a second time. Returns its folder's name and
    its last weight gradient (reduced by sparkrunner's timed DDP hook)."""
    import os
    import time

    import torch
    import torch.distributed as dist

    import sparkrunner

    dist.init_process_group("gloo")
    slow = dist.get_rank() == slow_rank
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def batches():  # the user's own loader
        for _ in range(steps):
            time.sleep(EXTRA_S if slow and part == "data" else 0.0)
            yield torch.ones(8, 4) * (dist.get_rank() + 1)

    for x in sparkrunner.timed(batches()):
        time.sleep(STEP_S + (EXTRA_S if slow and part == "compute" else 0.0))
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        sparkrunner.report_progress(total=steps)
    dist.destroy_process_group()
    return os.path.basename(os.getcwd()), model.module.weight.grad[0].tolist()


def horovod_steps(steps: int) -> None:
    """Healthy Horovod training: every rank the same work; steps from `report_progress` alone."""
    import time

    import horovod.torch as hvd
    import torch

    import sparkrunner

    hvd.init()
    model = torch.nn.Linear(4, 1)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
    )
    for _ in range(steps):
        time.sleep(STEP_S)
        optimizer.zero_grad()
        model(torch.ones(8, 4)).sum().backward()
        optimizer.step()
        sparkrunner.report_progress(total=steps)


def placed(name: str, request: pytest.FixtureRequest) -> Placement:
    return Placement(name, request.getfixturevalue("spark_cluster") if name == "spark" else None)


def runner_on(placement: Placement, launcher: str, **options: Any) -> Runner:
    """4 ranks: 2 per barrier task on Spark."""
    per_task = {} if placement.spark is None else {"spark": placement.spark, "ranks_per_task": 2}
    return Runner(np=placement.np(4), launcher=launcher, progress=False, **per_task, **options)


def straggler_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, StragglerWarning)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("placement", "launcher", "part", "named"),
    [
        ("spark", "direct", "compute", "computing"),
        pytest.param("np<0", "mpirun", "data", "waiting for data", marks=LAUNCHERS[1].marks),
    ],
)
def test_a_slow_rank_is_named_with_the_part_that_explains_the_gap(
    placement: str, launcher: str, part: str, named: str, request: pytest.FixtureRequest
) -> None:
    where = placed(placement, request)
    runner = runner_on(where, launcher, tracking=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folders, grads = zip(*runner.run_all(ddp_steps, 60, slow_rank=3, part=part), strict=True)
    found = straggler_warnings(caught)
    assert len(found) == 1, found
    # rank 3 is the second of barrier task 1's ranks
    runs_in = "the driver" if where.spark is None else f"executor {folders[3]}, barrier task 1"
    assert found[0].startswith(f"rank 3 on {socket.gethostname()} ({runs_in}): "), found
    assert f"most of the extra time is {named}" in found[0]
    # d(sum of outputs)/dw is the batch's column sum, 8 * (rank + 1): DDP's mean over the 4 ranks is 20
    assert list(grads) == [[20.0] * 4] * 4
    table = runner.last_run.step_anatomy
    assert list(table.index) == [0, 1, 2, 3]
    assert list(table["steps"]) == [60] * 4  # 60 batches: the progress reports added no steps
    assert list(table["executor"]) == ([None] * 4 if where.spark is None else list(folders))
    slow, fast = table.loc[3], table.loc[0]
    column = "data_median_s" if part == "data" else "compute_median_s"
    assert slow[column] >= fast[column] + EXTRA_S / 2
    assert (table["comm_p95_s"] > 0).all()  # the DDP hook timed every rank's wait for its gradients


@pytest.mark.slow
def test_a_healthy_horovod_run_warns_of_nothing_and_logs_its_anatomy_np_below_zero_direct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the driver, launcher direct: a run with no straggler on Spark is the DDP test's (one warning, for
    its slow rank alone); the MLflow metrics and the HTML report are written by the driver wherever ranks run."""
    monkeypatch.setenv("SPARKRUNNER_REPORT_DIR", str(tmp_path))
    runner = runner_on(Placement("np<0"), "direct")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.run_all(horovod_steps, 200)
    assert straggler_warnings(caught) == []
    record = runner.last_run
    table = record.step_anatomy
    assert list(table["steps"]) == [199] * 4  # 200 reports close 199 steps
    assert list(table["executor"]) == [None] * 4
    assert (table["comm_p95_s"] > 0).all()  # Horovod's synchronize was timed
    run = mlflow.MlflowClient().get_run(record.mlflow_run_id)
    for rank in range(4):
        assert run.data.metrics[f"rank{rank}.own_median_s"] == pytest.approx(table.loc[rank, "own_median_s"])
    assert record.report_path == str(tmp_path / f"sparkrunner-{record.run_id}.html")
    report = Path(record.report_path).read_text()
    assert "<svg" in report and "http" not in report.replace("http://www.w3.org/2000/svg", "")
    artifacts = [a.path for a in mlflow.MlflowClient().list_artifacts(record.mlflow_run_id, "sparkrunner")]
    assert f"sparkrunner/sparkrunner-{record.run_id}.html" in artifacts


def untimed_ddp_steps(steps: int) -> list[float]:
    """DDP training whose model `collective_timing.leave_untimed` keeps on DDP's own reduction; one rank sleeps
    more, so that the other waits in that reduction. Returns the last weight gradient."""
    import time

    import torch
    import torch.distributed as dist

    import sparkrunner
    from sparkrunner.ranks import collective_timing

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    collective_timing.leave_untimed(model)
    for x in sparkrunner.timed([torch.ones(8, 4) * (dist.get_rank() + 1)] * steps):
        time.sleep(0.01 * dist.get_rank())
        model.zero_grad()
        model(x).sum().backward()
    dist.destroy_process_group()
    return model.module.weight.grad[0].tolist()


def test_a_ddp_left_untimed_reduces_as_ddp_and_counts_no_wait_np_below_zero_direct() -> None:
    runner = Runner(np=-2, launcher="direct", progress=False, tracking=False)
    grads = runner.run_all(untimed_ddp_steps, 20)
    # d(sum of outputs)/dw is the batch's column sum, 8 * (rank + 1): DDP's mean over the 2 ranks is 12
    assert grads == [[12.0] * 4] * 2
    table = runner.last_run.step_anatomy
    assert list(table["steps"]) == [20, 20]
    assert (table["comm_p95_s"] == 0).all()  # no hook ran: rank 0's wait for rank 1 counts as compute
    assert table.loc[0, "compute_median_s"] > 0.005


def loader_steps(uri: str, batch: int, pause_s: float) -> list[int]:
    """Two epochs of ``timed(TorchProgress(TorchLoader(data)).epoch(e))`` (three step sources nested: the loader
    must count each step once), then a validation pass of a NumpyLoader iterated after them. Returns the batches
    each loop saw, counted here."""
    import time

    import sparkrunner
    from sparkrunner import TorchProgress
    from sparkrunner.data import NumpyLoader, TorchLoader
    from sparkrunner.data.dataset import scan

    data = scan(uri)
    progress = TorchProgress(TorchLoader(data, batch), epochs=2)
    seen = []
    for epoch in range(2):
        seen.append(0)
        for _ in sparkrunner.timed(progress.epoch(epoch)):
            time.sleep(pause_s)
            seen[-1] += 1
    seen.append(sum(1 for _ in NumpyLoader(data, batch)))
    return seen


def test_steps_come_from_sparkrunners_loaders_once_and_the_terminal_shows_a_table_np_below_zero_direct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sparkrunner.observe import anatomy

    rows = 400
    pq.write_table(pa.table({"x": list(range(rows))}), tmp_path / "part-0.parquet", row_group_size=20)
    monkeypatch.setattr(anatomy, "ANATOMY_TABLE_EVERY_S", 0.0)  # every window's table, as a terminal shows it
    runner = Runner(np=-2, launcher="direct", progress=True, tracking=False)
    with caplog.at_level(logging.INFO, logger="sparkrunner"):
        seen = runner.run_all(loader_steps, str(tmp_path), 10, 0.002)
    assert [sum(loops) for loops in seen] == [3 * rows // 2 // 10] * 2  # 20 batches a loop, each rank
    table = runner.last_run.step_anatomy
    assert list(table["steps"]) == [sum(loops) for loops in seen]  # not one more for the progress reports
    assert (table["compute_median_s"] >= 0.0015).all()  # the 2 ms pause between two requests for a batch
    shown = [r.getMessage() for r in caplog.records if "step anatomy, median ms per step" in r.getMessage()]
    assert shown, "no per-rank table was logged"
    header, *lines = shown[-1].splitlines()[1:]
    assert header.split() == ["rank", "steps/s", "data", "compute", "comm", "own", "step"]
    assert sorted(int(line.split()[0]) for line in lines) == [0, 1]
    assert all(float(line.split()[1]) > 0 for line in lines)
