"""Ranks report steps; the driver shows a bar and returns per-rank step timings with the run."""

from __future__ import annotations

import pytest

from sparkrunner import Runner, TorchProgress, report_progress


def steps_with_a_slow_rank(steps: int, slow_rank: int) -> str:
    import time

    from sparkrunner import rank_context

    pause = 0.2 if rank_context().rank == slow_rank else 0.0
    for step in range(1, steps + 1):
        time.sleep(pause)
        report_progress(epoch=0, total=steps, samples=16, loss=1.0 / step)
    return "done"


def torch_training(epochs: int) -> float:
    import torch

    from sparkrunner import TorchProgress

    torch.manual_seed(0)
    x = torch.randn(40, 3)
    y = x.sum(dim=1, keepdim=True)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    progress = TorchProgress(loader, epochs=epochs)
    for epoch in range(epochs):
        for xb, yb in progress.epoch(epoch):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            progress.log(loss=loss)
    return float(loss)


@pytest.mark.slow
def test_timings_per_rank_and_the_slowest_rank(capsys: pytest.CaptureFixture[str]) -> None:
    runner = Runner(np=-2, tracking=False)
    assert runner.run(steps_with_a_slow_rank, 6, slow_rank=1) == "done"  # run() still returns rank 0's value
    record = runner.last_run
    assert record is not None and record.timings is not None
    timings = record.timings
    for rank in (0, 1):
        assert list(timings[timings["rank"] == rank]["step"]) == [1, 2, 3, 4, 5, 6]
    assert {"rank", "step", "epoch", "samples", "step_s", "elapsed_s", "loss"} <= set(timings.columns)
    throughput = record.rank_throughput()
    assert throughput is not None
    assert list(throughput["steps"]) == [6, 6]
    assert {"steps_per_s", "samples_per_s", "median_step_s"} <= set(throughput.columns)
    assert record.slowest_rank == 1  # 0.2 s sleeps against none
    bar = capsys.readouterr().err
    assert "training" in bar and "6/6" in bar and "loss=0.1667" in bar


def test_no_bar_when_progress_is_off(capsys: pytest.CaptureFixture[str]) -> None:
    runner = Runner(np=-1, tracking=False, progress=False)
    runner.run(steps_with_a_slow_rank, 3, slow_rank=-1)
    assert runner.last_run is not None and runner.last_run.timings is not None
    assert len(runner.last_run.timings) == 3
    assert "training" not in capsys.readouterr().err


@pytest.mark.slow
def test_torch_helper_reports_each_batch_with_its_size() -> None:
    runner = Runner(np=-2, tracking=False, progress=False)
    runner.run(torch_training, 2)
    assert runner.last_run is not None and runner.last_run.timings is not None
    timings = runner.last_run.timings
    per_rank = timings[timings["rank"] == 1]
    assert list(per_rank["step"]) == [1, 2, 3, 4, 5, 6]  # 3 batches of 40 samples, 2 epochs
    assert list(per_rank["epoch"]) == [0, 0, 0, 1, 1, 1]
    assert list(per_rank["samples"]) == [16, 16, 8, 16, 16, 8]
    assert per_rank["loss"].iloc[-1] < per_rank["loss"].iloc[0]


def test_outside_a_run_nothing_is_sent() -> None:
    assert report_progress(1, loss=0.5) is False
    progress = TorchProgress([[1, 2], [3, 4]])
    assert list(progress.epoch(0)) == [[1, 2], [3, 4]]
