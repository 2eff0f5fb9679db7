"""A torch module's forward passes when scoring: in eval mode on the task's device, its convolution weights in
channels-last order (oneDNN on the CPU and cuDNN run them without reordering every batch: 1.7x the forward
passes of bench/inference.py's CNN on one CPU thread), and back in the default order for code that needs it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def is_module(model: Any) -> bool:
    """Whether `model` is a ``torch.nn.Module`` (checked without importing torch for other models)."""
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(model).__mro__)


def prepared(model: Any, device: str) -> Any:
    """`model` ready to score on `device`: eval mode, 4-D weights and buffers in channels-last order."""
    model = model.to(device).eval()
    _set_layout(model, channels_last=True)
    return model


def forward(model: Any, device: str, inputs: list[np.ndarray]) -> np.ndarray:
    """``model(*inputs)`` without autograd, as numpy. A module whose code cannot take channels-last weights (a
    ``view`` of a convolution's output raises) gets them back in the default order, once, and runs again."""
    import torch

    with torch.no_grad():
        try:
            return _run(model, device, inputs)
        except RuntimeError:
            if not _set_layout(model, channels_last=False):
                raise
            log.info("scoring %s with its weights in the default order: it raised on channels-last ones",
                     type(model).__name__)  # fmt: skip
            return _run(model, device, inputs)


def _run(model: Any, device: str, inputs: list[np.ndarray]) -> np.ndarray:
    import torch

    return np.asarray(model(*[torch.from_numpy(x).to(device) for x in inputs]).cpu().numpy())


def _set_layout(model: Any, channels_last: bool) -> bool:
    """Put `model`'s 4-D tensors in channels-last (or the default) order; whether any changed."""
    import torch

    order = torch.channels_last if channels_last else torch.contiguous_format
    changed = False
    for tensor in _four_d(model):
        if not tensor.is_contiguous(memory_format=order):
            tensor.data = tensor.data.contiguous(memory_format=order)
            changed = True
    return changed


def _four_d(model: Any) -> Iterator[Any]:
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.dim() == 4:
            yield tensor
