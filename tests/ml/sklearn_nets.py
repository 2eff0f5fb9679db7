"""A torch module whose own code imports scikit-learn. The tests pickle their own modules by value (as a notebook's
classes are): the pickle carries the class, and its functions' globals name scikit-learn's `softmax`."""

from __future__ import annotations

import torch
from sklearn.utils.extmath import softmax


class SoftmaxHead(torch.nn.Linear):
    """A linear layer whose outputs go through scikit-learn's softmax."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(softmax(super().forward(x).detach().numpy()))
