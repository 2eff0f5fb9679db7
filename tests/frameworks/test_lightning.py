"""PyTorch Lightning DDP on every launcher and placement, with `strategy=sparkrunner.lightning.ddp()` and no
`devices`/`num_nodes`: all of the run's ranks train, the sampler splits the data, the replicas agree, and the
strategy's callback reports every step to the bar and the step anatomy."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sparkrunner import Runner
from tests.matrix import Placement

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SAMPLES, BATCH, EPOCHS = 22, 4, 2


def fit_one_replica(
    samples: int, batch: int, epochs: int, stock: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One rank: a tiny regression fitted by Lightning's Trainer, as written for one machine plus the strategy;
    `stock` instead passes these Trainer options unchanged (code written for TorchDistributor, e.g. `"ddp"`)."""
    import os
    import socket
    import tempfile

    import pytorch_lightning as pl
    import torch

    import sparkrunner.lightning

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(int(os.environ["RANK"]))  # different initial weights: DDP must broadcast rank 0's
    x = torch.arange(samples * 4, dtype=torch.float32).reshape(samples, 4) / (samples * 4)
    data = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            accelerator="cpu",
            **(stock or {"strategy": sparkrunner.lightning.ddp()}),
            max_epochs=epochs,
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        model = Regression()
        initial = [p.detach().flatten().tolist() for p in model.parameters()]
        trainer.fit(model, torch.utils.data.DataLoader(data, batch_size=batch))
    return {
        "rank": int(os.environ["RANK"]),
        "global_rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "global_step": trainer.global_step,
        "weights": [p.detach().flatten().tolist() for p in model.parameters()],
        "initial": initial,
        "host": socket.gethostname(),
        "local_rank": int(os.environ["LOCAL_RANK"]),
    }


def test_ddp_trains_on_every_rank(placement: Placement, launcher: str) -> None:
    runner = Runner(np=placement.np(2), launcher=launcher, tracking=False)
    views = runner.run_all(fit_one_replica, SAMPLES, BATCH, EPOCHS)
    world = len(views)
    steps = math.ceil(math.ceil(SAMPLES / world) / BATCH) * EPOCHS  # DistributedSampler pads to equal shards
    assert steps != math.ceil(SAMPLES / BATCH) * EPOCHS, "the oracle must tell a split from no split"
    for view in views:
        assert view["global_rank"] == view["rank"] and view["world_size"] == world, view
        assert view["global_step"] == steps, view
        assert view["weights"] == views[0]["weights"], "replicas diverged"
    # the strategy's callback reported every batch: the anatomy counted Lightning's steps (one report to the
    # next, so the first batch opens the count) and the run's progress saw them all
    assert list(runner.last_run.step_anatomy["steps"]) == [steps - 1] * world
    timings = runner.last_run.timings
    assert timings.groupby("rank")["step"].max().tolist() == [steps] * world
