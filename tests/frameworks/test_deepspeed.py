"""DeepSpeed ZeRO stages 1 and 2 on CPU (DeepSpeed's CPU accelerator, gloo), from the torch variables every rank
gets: no `deepspeed` launcher, no hostfile."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrunner import Runner
from tests.matrix import Placement

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SAMPLES, BATCH, STEPS = 32, 4, 6


def zero_replica(stage: int) -> dict[str, Any]:
    """One rank: a linear regression through `deepspeed.initialize` with ZeRO `stage`; every rank returns its
    full weights."""
    import os

    import deepspeed
    import torch

    torch.manual_seed(int(os.environ["RANK"]))  # different initial weights: DeepSpeed must broadcast rank 0's
    model = torch.nn.Linear(4, 1)
    config = {
        "train_micro_batch_size_per_gpu": BATCH,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**6,
    }
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    rank, world = engine.global_rank, engine.world_size
    x = torch.arange(SAMPLES * 4, dtype=torch.float32).reshape(SAMPLES, 4) / (SAMPLES * 4)
    y = x.sum(dim=1, keepdim=True)
    for step in range(STEPS):
        start = (step * world + rank) * BATCH % SAMPLES  # each rank its own micro-batch
        loss = torch.nn.functional.mse_loss(engine(x[start : start + BATCH]), y[start : start + BATCH])
        engine.backward(loss)
        engine.step()
    return {
        "rank": int(os.environ["RANK"]),
        "global_rank": rank,
        "world_size": world,
        "accelerator": deepspeed.get_accelerator().device_name(),
        "weights": [v for p in engine.module.parameters() for v in p.detach().flatten().tolist()],
    }


def mse(weights: list[float]) -> float:
    """The full data's mean squared error of a linear model with `weights` (4 weights, then the bias)."""
    import torch

    x = torch.arange(SAMPLES * 4, dtype=torch.float32).reshape(SAMPLES, 4) / (SAMPLES * 4)
    prediction = x @ torch.tensor(weights[:4]) + weights[4]
    return float(torch.nn.functional.mse_loss(prediction, x.sum(dim=1)))


def test_zero_trains_data_parallel_on_cpu(placement: Placement, launcher: str) -> None:
    """Every rank is its own DeepSpeed rank on the CPU, the replicas agree, and training reduced the loss
    from rank 0's initial weights (the ranks start from different ones: DeepSpeed broadcasts rank 0's).
    ZeRO stage 1 runs on the driver (np < 0), stage 2 in Spark: the stage is DeepSpeed's business, not the
    launcher's, so each stage meets both launchers without the whole product of the three."""
    import torch

    stage = 1 if placement.np(2) < 0 else 2
    views = Runner(np=placement.np(2), launcher=launcher, tracking=False).run_all(zero_replica, stage)
    torch.manual_seed(0)
    initial = [v for p in torch.nn.Linear(4, 1).parameters() for v in p.detach().flatten().tolist()]
    for view in views:
        assert view["global_rank"] == view["rank"] and view["world_size"] == len(views), view
        assert view["accelerator"] == "cpu", view
        assert view["weights"] == views[0]["weights"], "replicas diverged"
    assert mse(views[0]["weights"]) < mse(initial), "training did not reduce the loss"
