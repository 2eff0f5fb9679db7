"""Step anatomy and straggler warnings with 4 real ranks on the driver (np < 0): torch DDP over Gloo through
the direct launcher, Horovod through both launchers. Slowness is injected with sleeps well above the noise of a
loaded machine (a 40 ms step against 30 ms ones), so what is checked is behaviour under a known gap."""

from __future__ import annotations

import warnings
from pathlib import Path

import mlflow
import pytest

from sparkrunner import Runner, StragglerWarning
from tests.matrix import LAUNCHERS

STEP_S = 0.03
EXTRA_S = 0.01  # +33% of the step's own time, in compute or in the data wait


def ddp_steps(steps: int, slow_rank: int, part: str) -> None:
    """DDP training whose `slow_rank` computes (or waits for its data) EXTRA_S longer each step; it also
    reports progress every step, which must not count the steps a second time."""
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
            yield torch.ones(8, 4)

    for x in sparkrunner.timed(batches()):
        time.sleep(STEP_S + (EXTRA_S if slow and part == "compute" else 0.0))
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        sparkrunner.report_progress(total=steps)
    dist.destroy_process_group()


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


def straggler_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, StragglerWarning)]


@pytest.mark.slow
@pytest.mark.parametrize(("part", "named"), [("compute", "computing"), ("data", "waiting for data")])
def test_a_slow_rank_is_named_with_the_part_that_explains_the_gap(part: str, named: str) -> None:
    runner = Runner(np=-4, launcher="direct", tracking=False, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.run(ddp_steps, 60, slow_rank=3, part=part)
    found = straggler_warnings(caught)
    assert len(found) == 1, found
    assert found[0].startswith("rank 3 on ") and f"most of the extra time is {named}" in found[0]
    table = runner.last_run.step_anatomy
    assert list(table.index) == [0, 1, 2, 3]
    assert list(table["steps"]) == [60] * 4  # 60 batches: the progress reports added no steps
    slow, fast = table.loc[3], table.loc[0]
    column = "data_median_s" if part == "data" else "compute_median_s"
    assert slow[column] >= fast[column] + EXTRA_S / 2
    assert (table["comm_p95_s"] > 0).all()  # the DDP hook timed every rank's wait for its gradients


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_healthy_horovod_run_warns_of_nothing_and_logs_its_anatomy(
    launcher: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKRUNNER_REPORT_DIR", str(tmp_path))
    runner = Runner(np=-4, launcher=launcher, progress=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.run(horovod_steps, 200)
    assert straggler_warnings(caught) == []
    record = runner.last_run
    table = record.step_anatomy
    assert list(table["steps"]) == [199] * 4  # 200 reports close 199 steps
    assert (table["comm_p95_s"] > 0).all()  # Horovod's synchronize was timed
    run = mlflow.MlflowClient().get_run(record.mlflow_run_id)
    for rank in range(4):
        assert run.data.metrics[f"rank{rank}.own_median_s"] == pytest.approx(table.loc[rank, "own_median_s"])
    assert record.report_path == str(tmp_path / f"sparkrunner-{record.run_id}.html")
    report = Path(record.report_path).read_text()
    assert "<svg" in report and "http" not in report.replace("http://www.w3.org/2000/svg", "")
    artifacts = [a.path for a in mlflow.MlflowClient().list_artifacts(record.mlflow_run_id, "sparkrunner")]
    assert f"sparkrunner/sparkrunner-{record.run_id}.html" in artifacts
