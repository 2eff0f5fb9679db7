"""Losses by name, and what a loss says about the model: a classifier (and how its outputs become
probabilities) or a regressor. Shared by the driver (the output columns), the ranks and the executors."""

from __future__ import annotations

from typing import Any

LOSS_NAMES = ("mse", "l1", "smooth_l1", "cross_entropy", "nll", "bce_with_logits")
"""Names `loss` accepts besides a torch loss module or a function ``loss(outputs, labels)``."""

_MODULES = {
    "mse": "MSELoss",
    "l1": "L1Loss",
    "smooth_l1": "SmoothL1Loss",
    "cross_entropy": "CrossEntropyLoss",
    "nll": "NLLLoss",
    "bce_with_logits": "BCEWithLogitsLoss",
}
_PROBABILITIES = {"CrossEntropyLoss": "softmax", "NLLLoss": "exp", "BCEWithLogitsLoss": "sigmoid"}


def loss_module(loss: Any) -> Any:
    """A torch loss for `loss` (a name, a loss module, or a function), per sample (``reduction="none"``) when
    it is a module, so that sample weights can apply."""
    import copy

    import torch

    if isinstance(loss, str):
        loss = getattr(torch.nn, _MODULES[loss])()
    if isinstance(loss, torch.nn.Module) and hasattr(loss, "reduction"):
        loss = copy.copy(loss)
        loss.reduction = "none"
    return loss


def probability_kind(loss: Any) -> str | None:
    """How a classifier's outputs become probabilities ("softmax", "exp", "sigmoid"); None for a regressor."""
    if isinstance(loss, Constructed):
        loss = loss.factory()
    name = _MODULES.get(loss, "") if isinstance(loss, str) else type(loss).__name__
    return _PROBABILITIES.get(name)


def metric_name(fn: Any) -> str:
    """A metric function's name in the history (`TorchEstimator`'s `metrics`): its ``__name__``, else its
    type's."""
    return str(getattr(fn, "__name__", type(fn).__name__))


def label_dtype(kind: str | None) -> str:
    """The dtype labels take for a loss: class indices for softmax and log-probability outputs."""
    return "int64" if kind in ("softmax", "exp") else "float32"


class BatchMeanLoss:
    """A loss function that reduces the batch to one number (as Horovod's estimators take them), giving every
    row the batch's value: the rows' mean is then the same loss, with the same gradients."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, outputs: Any, labels: Any) -> Any:
        value = self.fn(outputs, labels)
        return value.expand(len(outputs)) if value.dim() == 0 else value


class UnreducedLoss:
    """A loss function called with ``reduction="none"`` (one loss per row), as Horovod's estimators call theirs
    when rows carry sample weights."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, outputs: Any, labels: Any) -> Any:
        return self.fn(outputs, labels, reduction="none")


class Constructed:
    """Horovod's `loss_constructors` (one): a zero-argument `factory` that builds the loss, called where the loss
    is first used (in each rank), so the loss itself need not pickle. A loss module built is used per row; a
    function built is taken as Horovod takes one (`BatchMeanLoss`, or `UnreducedLoss` with sample weights)."""

    def __init__(self, factory: Any, weighted: bool = False) -> None:
        self.factory, self.weighted = factory, weighted
        self._built: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"factory": self.factory, "weighted": self.weighted, "_built": None}

    def __call__(self, outputs: Any, labels: Any) -> Any:
        if self._built is None:
            self._built = self._build()
        return self._built(outputs, labels)

    def _build(self) -> Any:
        return loss_module(horovod_form(self.factory(), self.weighted))


def horovod_form(loss: Any, weighted: bool) -> Any:
    """A loss as Horovod's estimators take it: a function returns the batch's mean (`BatchMeanLoss`), or with
    sample weights is called with ``reduction="none"`` (`UnreducedLoss`); anything else (a module) as it is."""
    import torch

    if callable(loss) and not isinstance(loss, torch.nn.Module):
        return UnreducedLoss(loss) if weighted else BatchMeanLoss(loss)
    return loss
