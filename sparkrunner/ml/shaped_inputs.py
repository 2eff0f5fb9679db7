"""A torch module with Horovod's `input_shapes` as one that takes the feature matrix: what MLflow logs, so that the
logged model takes what `transform` takes (the feature columns side by side) and gives what it gives."""

from __future__ import annotations

from typing import Any

import torch

from sparkrunner.ml import features


class ShapedInputs(torch.nn.Module):
    """``module(*columns)`` from a float32 feature matrix, cut into one tensor per column in its row shape."""

    def __init__(self, module: torch.nn.Module, shapes: tuple[tuple[int, ...], ...]) -> None:
        super().__init__()
        self.module = module
        self.shapes = shapes

    def forward(self, x: torch.Tensor) -> Any:
        parts = features.split(x.detach().cpu().numpy().astype("float32"), self.shapes)
        return self.module(*[torch.from_numpy(part).to(x.device) for part in parts])
