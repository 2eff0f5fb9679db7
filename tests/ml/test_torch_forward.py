"""`sparkrunner.ml.workers.torch_forward`: the forward passes scoring runs (channels-last convolution weights, and
the default order again for code that needs it) give what an untouched copy of the module gives."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from sparkrunner.ml.workers import torch_forward


class Flattened(torch.nn.Module):
    """8x8 one-channel images as 64 features a row; `view` (not `reshape`) needs a default-order conv output."""

    def __init__(self, view: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(4, 6, 3, padding=1))  # fmt: skip
        self.head = torch.nn.Linear(6 * 8 * 8, 3)
        self.view = view

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x.reshape(-1, 1, 8, 8))
        return self.head(h.view(len(h), -1) if self.view else torch.flatten(h, 1))


class Volume(torch.nn.Module):
    """A 3-D convolution (5-D weights, which have no channels-last order of rank 4) over 4x4x4 volumes."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv3d(1, 2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.reshape(-1, 1, 4, 4, 4)).flatten(1)


def untouched(model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return copy.deepcopy(model).eval()(torch.from_numpy(x)).numpy()


X = np.random.default_rng(0).random((50, 64), dtype=np.float32)


def test_convolution_weights_are_channels_last_and_score_as_the_module_does() -> None:
    model = Flattened(view=False)
    expected = untouched(model, X)
    ready = torch_forward.prepared(model, "cpu")
    assert not ready.training
    assert ready.conv[2].weight.is_contiguous(memory_format=torch.channels_last)
    assert not ready.conv[2].weight.is_contiguous()
    np.testing.assert_allclose(torch_forward.forward(ready, "cpu", [X]), expected, rtol=1e-5, atol=1e-6)


def test_a_module_whose_view_needs_the_default_order_gets_it_back_and_scores() -> None:
    model = Flattened(view=True)
    expected = untouched(model, X)
    ready = torch_forward.prepared(model, "cpu")
    for _ in range(2):  # the second batch runs in the default order without raising first
        np.testing.assert_allclose(torch_forward.forward(ready, "cpu", [X]), expected, rtol=1e-5, atol=1e-6)
    assert ready.conv[2].weight.is_contiguous()


@pytest.mark.parametrize(
    "model",
    [Volume(), torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))],
    ids=["conv3d", "mlp"],
)
def test_modules_without_4d_weights_score_unchanged(model: torch.nn.Module) -> None:
    expected = untouched(model, X)
    np.testing.assert_array_equal(
        torch_forward.forward(torch_forward.prepared(model, "cpu"), "cpu", [X]), expected
    )


def test_a_module_that_cannot_take_the_input_still_raises() -> None:
    ready = torch_forward.prepared(Flattened(view=False), "cpu")
    with pytest.raises(RuntimeError):
        torch_forward.forward(ready, "cpu", [X[:, :60].copy()])
