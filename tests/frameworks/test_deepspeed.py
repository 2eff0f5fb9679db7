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
    gathered full weights."""
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


def reference_weights(world: int) -> list[float]:
    """The oracle: plain torch SGD on rank 0's initial weights with the mean gradient of every rank's batch."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.arange(SAMPLES * 4, dtype=torch.float32).reshape(SAMPLES, 4) / (SAMPLES * 4)
    y = x.sum(dim=1, keepdim=True)
    for step in range(STEPS):
        optimizer.zero_grad()
        for rank in range(world):
            start = (step * world + rank) * BATCH % SAMPLES
            loss = torch.nn.functional.mse_loss(model(x[start : start + BATCH]), y[start : start + BATCH])
            (loss / world).backward()
        optimizer.step()
    return [v for p in model.parameters() for v in p.detach().flatten().tolist()]


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_trains_data_parallel_on_cpu(placement: Placement, launcher: str, stage: int) -> None:
    views = Runner(np=placement.np(2), launcher=launcher, tracking=False).run_all(zero_replica, stage)
    expected = reference_weights(len(views))
    for view in views:
        assert view["global_rank"] == view["rank"] and view["world_size"] == len(views), view
        assert view["accelerator"] == "cpu", view
        assert view["weights"] == pytest.approx(expected, abs=1e-5), view
