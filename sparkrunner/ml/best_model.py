"""Which epoch's weights a Keras fit returns under `checkpoint_callback`, with Horovod's meaning: Horovod points
the callback at its store and returns the model it saved last, so a ``save_best_only`` callback (Horovod's
``BestModelCheckpoint``) gives the best epoch by its monitored metric, any other the last epoch's. The ranks keep
the best weights in memory; no file is written."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkrunner.errors import InvalidArgumentError

_MODES = ("min", "max")


@dataclass(frozen=True)
class BestOf:
    """The epoch to return: the first whose `monitor` value is the lowest (`mode` "min") or highest ("max")."""

    monitor: str
    mode: str

    def improves(self, value: float, best: float | None) -> bool:
        """Whether `value` beats `best` (None: nothing seen yet); a tie keeps the earlier epoch, as Keras does."""
        if best is None:
            return True
        return value < best if self.mode == "min" else value > best


def best_of(callback: Any) -> BestOf | None:
    """The choice a checkpoint callback (Keras' ``ModelCheckpoint``, Horovod's ``BestModelCheckpoint`` or
    sparkrunner's stand-in) asks for; None for the last epoch (no callback, or not ``save_best_only``)."""
    if callback is None or not getattr(callback, "save_best_only", False):
        return None
    monitor = getattr(callback, "monitor", None)
    if not isinstance(monitor, str) or not monitor:
        raise InvalidArgumentError(
            f"checkpoint_callback={callback!r} has no `monitor`: give a ModelCheckpoint or BestModelCheckpoint "
            "naming the metric to choose the best epoch by, e.g. monitor='val_loss'"
        )
    save_freq = getattr(callback, "save_freq", "epoch")
    if save_freq != "epoch":
        raise InvalidArgumentError(
            f"checkpoint_callback has save_freq={save_freq!r}: the best model is chosen once per epoch, from the "
            "epoch's metrics; give save_freq='epoch'"
        )
    return BestOf(monitor, _mode(callback, monitor))


def _mode(callback: Any, monitor: str) -> str:
    """ "min" or "max": the callback's `mode`, else its comparison (tf_keras keeps only that), else Keras'
    'auto' rule: an accuracy, AUC or F-measure is maximised, anything else (a loss, an error) minimised."""
    mode = getattr(callback, "mode", None)
    if mode in _MODES:
        return str(mode)
    if mode not in (None, "auto"):
        raise InvalidArgumentError(f"checkpoint_callback has mode={mode!r}: give 'min', 'max' or 'auto'")
    compare = getattr(getattr(callback, "monitor_op", None), "__name__", "")
    if compare in ("less", "greater"):
        return "min" if compare == "less" else "max"
    name = monitor.removeprefix("val_")
    return "max" if "acc" in name or "auc" in name or name.startswith("fmeasure") else "min"
