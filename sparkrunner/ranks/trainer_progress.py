"""The Hugging Face Trainer's steps, counted with no change to the user's code.

When the rank imports ``transformers.trainer``, every `Trainer` built from then on (subclasses too: TRL's,
``Seq2SeqTrainer``) gets a `SparkRunnerProgress` callback, last in its list: each optimizer step is reported
(``state.global_step`` of ``state.max_steps``), so the bar, the per-rank timings and the step anatomy see
the run. A user's own callback that calls `report_progress` wins: once another report arrives between two of
ours, this callback stops reporting, so no step is counted twice. ``trainer.remove_callback(...)`` takes it out.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from sparkrunner.frameworks.after_import import after_import
from sparkrunner.ranks import progress

CALLBACK_NAME = "SparkRunnerProgress"


def install() -> None:
    """Add the progress callback to every `transformers.Trainer` this process builds from now on."""
    after_import("transformers.trainer", _patch_trainer)


def _patch_trainer(module: ModuleType) -> None:
    trainer_class = module.Trainer
    callback_class = _callback_class(module)
    init = trainer_class.__init__

    @functools.wraps(init)
    def init_with_progress(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        handler = self.callback_handler
        if not any(type(callback).__name__ == CALLBACK_NAME for callback in handler.callbacks):
            self.add_callback(callback_class())

    trainer_class.__init__ = init_with_progress


def _callback_class(module: ModuleType) -> type:
    base = module.TrainerCallback

    class SparkRunnerProgress(base):  # type: ignore[misc,valid-type]
        """Reports each optimizer step to sparkrunner, unless the user's code reports steps itself."""

        def __init__(self) -> None:
            self._reports_seen: int | None = None  # None: the user's code reports, this callback does not

        def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            self._reports_seen = progress.reports_made()

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if self._reports_seen is None:
                return
            if progress.reports_made() != self._reports_seen:  # another source reported this step
                self._reports_seen = None
                return
            total = state.max_steps if state.max_steps and state.max_steps > 0 else None
            epoch = int(state.epoch) if state.epoch is not None else None
            progress.report_progress(state.global_step, epoch=epoch, total=total)
            self._reports_seen = progress.reports_made()

    return SparkRunnerProgress
