"""The training of `LightningEstimator`, in every rank: the user's LightningModule fitted by a Lightning
`Trainer` under `sparkrunner.lightning.ddp()`, each rank's batches from its own shard (equal steps on every
rank), each epoch's logged metrics kept as the history, a checkpoint per epoch when the run has a folder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import cloudpickle
import numpy as np

from sparkrunner.common.environment import Env
from sparkrunner.ml.ranks.training import Batches, Data, loaders, model_inputs
from sparkrunner.ml.spec import TrainResult, TrainSpec
from sparkrunner.ranks.api import log_to_driver, rank_context
from sparkrunner.ranks.checkpoints import load_checkpoint, save_checkpoint


def train(spec: TrainSpec, train_data: Data, val_data: Data | None) -> TrainResult | None:
    """Fit `spec`'s LightningModule on this rank's shard of `train_data`; rank 0 returns it and its history."""
    import pytorch_lightning as pl
    import torch

    import sparkrunner.lightning

    torch.manual_seed(spec.seed)
    module, callbacks, trainer_args = cloudpickle.loads(spec.payload)
    loader, val_loader = loaders(spec, train_data, val_data)
    validation = None if val_loader is None else _batches(spec, val_loader)
    start, history, optimizer_states = _resume(module)
    recorder = _recorder(pl, spec, history, start, optimizer_states)
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            **{
                "accelerator": "gpu" if torch.cuda.is_available() else "cpu",
                "logger": False,
                "enable_checkpointing": False,
                "enable_progress_bar": False,
                "enable_model_summary": False,
                **(trainer_args or {}),
                "strategy": sparkrunner.lightning.ddp("pytorch_lightning"),
                "max_epochs": spec.epochs - start,
                "default_root_dir": root,
                "use_distributed_sampler": False,
                "callbacks": [*(callbacks or []), recorder],
            }
        )
        if start < spec.epochs:
            trainer.fit(module, _batches(spec, loader), validation)
    if rank_context().rank != 0:
        return None
    module.to("cpu").eval()
    return TrainResult(cloudpickle.dumps(module), history, _output_size(module, spec, loader))


def _output_size(module: Any, spec: TrainSpec, loader: Batches) -> int:
    """The width of the module's output on one row of zeros shaped like the features (what scoring holds)."""
    import torch

    shapes = {column.name: column.shape for column in loader.data.columns}
    row = {c: np.zeros((1, *shapes[c]), np.float32) for c in spec.feature_cols}
    with torch.no_grad():
        out = module(*[torch.from_numpy(x) for x in model_inputs(spec, row)])
    return int(out.shape[1]) if out.dim() > 1 else 1


def _batches(spec: TrainSpec, loader: Batches) -> Any:
    """A DataLoader of ``{column: tensor}`` batches in Horovod's Lightning estimator's shapes (`_tensor`); a new
    shuffle each epoch."""
    import torch

    class Batches(torch.utils.data.IterableDataset):
        epoch = 0

        def __iter__(self) -> Iterator[dict[str, Any]]:
            loader.set_epoch(self.epoch)
            self.epoch += 1
            for batch in loader:
                yield {column: _tensor(spec, column, values) for column, values in batch.items()}

        def __len__(self) -> int:
            return len(loader)

    return torch.utils.data.DataLoader(Batches(), batch_size=None)


def _tensor(spec: TrainSpec, column: str, values: np.ndarray) -> Any:
    """One column of a batch as Horovod's reader gives it: a scalar column (any numeric type) ``(rows,)``, an
    array or vector column ``(rows, n)``, in its `input_shapes`/`label_shapes` shape when one is given; integer
    label columns as int64 (class indices), every other column as float32 (the module's parameters' type)."""
    import torch

    integer_label = column in spec.label_cols and np.issubdtype(values.dtype, np.integer)
    rows = values if values.ndim == 1 else values.reshape(len(values), -1)
    tensor = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64 if integer_label else np.float32))
    shape = _shape(spec, column)
    return tensor if shape is None else tensor.reshape(len(values), *shape)


def _shape(spec: TrainSpec, column: str) -> tuple[int, ...] | None:
    """The row shape `input_shapes` or `label_shapes` gives `column`, or None."""
    if spec.input_shapes is not None and column in spec.feature_cols:
        return spec.input_shapes[spec.feature_cols.index(column)]
    if spec.label_shapes is not None and column in spec.label_cols:
        return spec.label_shapes[spec.label_cols.index(column)]
    return None


def _recorder(
    pl: Any, spec: TrainSpec, history: dict[str, list[float]], start: int, optimizer_states: list[Any]
) -> Any:
    """A callback that restores resumed optimizers' states, appends each epoch's logged metrics to `history`,
    checkpoints, and logs a line."""

    class EpochRecorder(pl.Callback):
        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            epoch = start + trainer.current_epoch
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if np.ndim(v.cpu()) == 0}
            for name, value in metrics.items():
                history.setdefault(name, []).append(value)
            if os.environ.get(Env.CHECKPOINT_DIR):
                optimizers = [o.state_dict() for o in trainer.optimizers]
                state = {"model": module.state_dict(), "optimizers": optimizers, "epoch": epoch}
                save_checkpoint({**state, "history": history}, step=epoch, background=True)
            if spec.verbose and trainer.global_rank == 0:
                line = ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
                log_to_driver(f"epoch {epoch + 1}/{spec.epochs}: {line}")

        def on_train_start(self, trainer: Any, module: Any) -> None:
            for optimizer, saved in zip(trainer.optimizers, optimizer_states, strict=False):
                optimizer.load_state_dict(saved)

    return EpochRecorder()


def _resume(module: Any) -> tuple[int, dict[str, list[float]], list[Any]]:
    """The epoch to start at and the history so far: from the run's latest checkpoint, after a failure."""
    if not os.environ.get(Env.CHECKPOINT_DIR):
        return 0, {}, []
    state = load_checkpoint(map_location="cpu")
    if state is None:
        return 0, {}, []
    module.load_state_dict(state["model"])
    log_to_driver(f"resuming from the checkpoint of epoch {state['epoch'] + 1}")
    return state["epoch"] + 1, state["history"], state["optimizers"]
