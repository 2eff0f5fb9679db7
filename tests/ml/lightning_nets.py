"""A LightningModule for the Lightning estimator tests: a linear regression that logs its train and validation
loss per epoch, synced over the ranks (shipped by value to the ranks and the executors)."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch

from tests.ml.nets import KillPoint, TwoInputs, classifier


class LinearRegression(pl.LightningModule):
    """y ~ x . w + b on the batch's ``x`` (float32 (rows, 3)) and ``y`` (float32 (rows,)) columns."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(3, 1)
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(self(batch["x"]).squeeze(1), batch["y"])
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        loss = torch.nn.functional.mse_loss(self(batch["x"]).squeeze(1), batch["y"])
        self.log("val_loss", loss, on_epoch=True, sync_dist=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class TwoClasses(pl.LightningModule):
    """Logits of two classes from the ``a`` and ``b`` columns (each ``(rows,)``) side by side
    (`tests.ml.nets.class_rows`)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = classifier()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        features = torch.stack([batch["a"], batch["b"]], dim=1)
        loss = torch.nn.functional.cross_entropy(self(features), batch["label"])
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.05)


class Steps(pl.Callback):
    """Every training step of every rank's Trainer goes through `point` (`tests.ml.nets.KillPoint`)."""

    def __init__(self, point: KillPoint) -> None:
        self.point = point

    def on_train_batch_start(self, *_: Any) -> None:
        self.point.step()


class TwoInputsModule(pl.LightningModule):
    """`tests.ml.nets.TwoInputs` as a LightningModule: the batch holds ``x`` as ``(rows, 3, 1)`` and ``s`` as
    ``(rows, 1)`` (their `input_shapes`), and ``forward(x, s)`` refuses any other shape."""

    def __init__(self) -> None:
        super().__init__()
        self.net = TwoInputs()

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return self.net(x, s)

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self(batch["x"], batch["s"]), batch["y"])

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=0.05)
