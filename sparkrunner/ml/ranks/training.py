"""The training loop of `TorchEstimator`, in every rank: torch DDP over this rank's shard, equal steps on every
rank, the epoch's metrics summed over all ranks, a checkpoint per epoch when the run has a folder for them."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import cloudpickle
import numpy as np

from sparkrunner.common.environment import Env
from sparkrunner.data.dataset import ParquetData
from sparkrunner.data.ranks.loader import NumpyLoader
from sparkrunner.data.stream_handle import StreamData
from sparkrunner.errors import InvalidArgumentError
from sparkrunner.ml import features, losses
from sparkrunner.ml.ranks.in_memory import InMemory
from sparkrunner.ml.spec import TrainResult, TrainSpec
from sparkrunner.ranks.api import log_to_driver, rank_context
from sparkrunner.ranks.checkpoints import load_checkpoint, save_checkpoint
from sparkrunner.ranks.progress import report_progress

Data = ParquetData | StreamData
Batches = NumpyLoader | InMemory


def train(spec: TrainSpec, train_data: Data, val_data: Data | None) -> TrainResult | None:
    """Train `spec`'s model on `train_data` with DDP; rank 0 returns the model and its history."""
    import torch.distributed as dist

    device = _device(spec.use_gpu)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        return _train(spec, train_data, val_data, device)
    finally:
        dist.destroy_process_group()


def _train(spec: TrainSpec, train_data: Data, val_data: Data | None, device: Any) -> TrainResult | None:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(spec.seed)
    model, optimizer, loss, metric_fns = cloudpickle.loads(spec.payload)
    model.to(device)
    optimizer = _optimizer(optimizer, model)
    loss_fn = losses.loss_module(loss)
    net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if spec.gradient_compression == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        net.register_comm_hook(None, default_hooks.fp16_compress_hook)  # None: the default process group
    loader, validation = loaders(spec, train_data, val_data)
    start, history = _resume(model, optimizer)
    output_size = 1
    for epoch in range(start, spec.epochs):
        loader.set_epoch(epoch)
        net.train()
        metrics, output_size = _epoch(spec, net, (loss_fn, metric_fns), loader, device, optimizer, epoch)
        if validation is not None:
            net.eval()
            with torch.no_grad():
                passed = _epoch(spec, net, (loss_fn, metric_fns), validation, device, None, epoch, "val_")
                metrics.update(passed[0])
        for name, value in metrics.items():
            history.setdefault(name, []).append(value)
        _checkpoint(model, optimizer, epoch, history)
        if spec.verbose and rank_context().rank == 0:
            log_to_driver(
                f"epoch {epoch + 1}/{spec.epochs}: " + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
            )
    if rank_context().rank != 0:
        return None
    return TrainResult(cloudpickle.dumps(model.to("cpu")), history, output_size)


def _epoch(
    spec: TrainSpec,
    net: Any,
    measures: tuple[Any, list[Any]],
    loader: Batches,
    device: Any,
    optimizer: Any,
    epoch: int,
    prefix: str = "",
) -> tuple[dict[str, float], int]:
    """One pass over `loader` (training when `optimizer` is given): its mean loss (and accuracy for a
    classifier) over every rank's rows, each metric function's mean over every rank's batches, and the width of
    the model's output. Training steps the optimizer once every `backward_passes_per_step` batches (and after
    the epoch's last) on their summed gradients, each batch's loss divided by that number, as Horovod's
    ``DistributedOptimizer`` does; DDP averages the gradients over the ranks only in a step's last backward
    pass."""
    import torch

    loss_fn, metric_fns = measures
    # weighted loss sum, weight sum, correct predictions, batches, then each metric's sum over batches
    totals = torch.zeros(4 + len(metric_fns), dtype=torch.float64)
    output_size = 1
    training, passes = optimizer is not None, spec.backward_passes_per_step
    if training:
        optimizer.zero_grad()
    for index, batch in enumerate(loader):
        steps = training and ((index + 1) % passes == 0 or index + 1 == len(loader))
        with net.no_sync() if training and not steps else contextlib.nullcontext():
            out, y, per_sample, weights = _forward(spec, net, loss_fn, batch, device)
            step_loss = (per_sample * weights).sum() / weights.sum()
            if training:
                (step_loss / passes).backward()
        if training:
            if steps:
                optimizer.step()
                optimizer.zero_grad()
            report_progress(
                epoch=epoch, total=spec.epochs * len(loader), samples=len(y), loss=step_loss.detach()
            )
        sums = [(per_sample.detach() * weights).sum(), weights.sum(), _correct(spec, out, y), torch.ones(())]
        totals += torch.stack([t.detach().double().cpu() for t in sums + _measured(metric_fns, out, y)])
        output_size = int(out.shape[1]) if out.dim() > 1 else 1
    totals = _summed_over_ranks(totals, device)
    metrics = {f"{prefix}loss": float(totals[0] / max(float(totals[1]), 1e-12))}
    if spec.probability is not None:
        metrics[f"{prefix}accuracy"] = float(totals[2] / max(float(totals[1]), 1e-12))
    for number, fn in enumerate(metric_fns):
        metrics[f"{prefix}{losses.metric_name(fn)}"] = float(totals[4 + number] / max(float(totals[3]), 1))
    return metrics, output_size


def _measured(metric_fns: list[Any], out: Any, y: Any) -> list[Any]:
    """Each metric function's value on the batch (its mean, when it returns more than one number)."""
    import torch

    with torch.no_grad():
        return [torch.as_tensor(fn(out.detach(), y)).double().mean() for fn in metric_fns]


def _summed_over_ranks(totals: Any, device: Any) -> Any:
    """`totals` summed over every rank, through the training device: NCCL reduces GPU tensors only."""
    import torch.distributed as dist

    on_device = totals.to(device)
    dist.all_reduce(on_device)
    return on_device.cpu()


def _forward(spec: TrainSpec, net: Any, loss_fn: Any, batch: dict[str, np.ndarray], device: Any) -> Any:
    """The batch's outputs, labels, per-row losses and row weights."""
    import torch

    inputs = [torch.from_numpy(x).to(device) for x in model_inputs(spec, batch)]
    out = net(*inputs)
    rows = len(inputs[0])
    y = _labels(spec, [batch[c] for c in spec.label_cols], out)
    return out, y, _per_sample(loss_fn(out, y), rows), _weights(spec, batch, rows, device)


def model_inputs(spec: TrainSpec, batch: dict[str, np.ndarray]) -> list[np.ndarray]:
    """What ``forward`` gets: the feature columns side by side as one float32 matrix, or with `input_shapes` one
    float32 array per column in its shape (Horovod's contract)."""
    columns = [batch[c] for c in spec.feature_cols]
    if spec.input_shapes is None:
        return [features.matrix(columns)]
    return features.shaped(columns, spec.input_shapes)


def _labels(spec: TrainSpec, columns: list[np.ndarray], out: Any) -> Any:
    """Labels as the loss wants them: class indices for softmax/log-probability outputs, else floats shaped like
    the model's output."""
    import torch

    values = features.matrix(columns)
    if spec.label_shapes is not None:
        (shape,) = spec.label_shapes
        shaped = torch.from_numpy(values.reshape(len(values), *shape)).to(out.device)
        return shaped.long() if losses.label_dtype(spec.probability) == "int64" else shaped
    if losses.label_dtype(spec.probability) == "int64":
        return torch.from_numpy(values.reshape(-1).astype(np.int64)).to(out.device)
    y = torch.from_numpy(values).to(out.device)
    return y.reshape(out.shape) if y.numel() == out.numel() else y.reshape(-1)


def _weights(spec: TrainSpec, batch: dict[str, np.ndarray], rows: int, device: Any) -> Any:
    import torch

    if spec.sample_weight_col is None:
        return torch.ones(rows, device=device)
    return torch.from_numpy(batch[spec.sample_weight_col].astype(np.float32)).to(device)


def _per_sample(loss: Any, rows: int) -> Any:
    """One loss per row (averaged over a row's outputs); a loss function that already reduced the batch
    cannot be weighted or summed across ranks exactly."""
    if loss.dim() == 0:
        raise InvalidArgumentError(
            "the loss function returned one number for the whole batch; it must return one per row (a torch "
            "loss module, whose reduction the estimator sets to 'none', or a function without reduction)"
        )
    return loss.reshape(rows, -1).mean(dim=1)


def _correct(spec: TrainSpec, out: Any, y: Any) -> Any:
    import torch

    if spec.probability is None:
        return torch.zeros((), dtype=torch.float64)
    if spec.probability == "sigmoid":  # logits: a positive one says 1
        predicted = (out.detach() > 0).to(y.dtype).reshape(y.shape)
        return (predicted == y).reshape(len(y), -1).all(dim=1).sum().double().cpu()
    return (out.detach().argmax(dim=1) == y).sum().double().cpu()


def loaders(spec: TrainSpec, train_data: Data, val_data: Data | None) -> tuple[Batches, Batches | None]:
    """This rank's training batches (shuffled as asked) and its part of the validation rows (None without a
    split) in the same order each epoch, in `val_batch_size` batches, else batches that leave out as few rows as
    can be (equal steps on every rank drop the remainder); each at most `*_steps_per_epoch` batches an epoch; kept in memory after the first epoch with `inmemory_cache_all`."""
    columns = spec.columns
    train = NumpyLoader(
        train_data, spec.batch_size, columns=columns, shuffle=spec.shuffle, seed=spec.seed,
        max_steps=spec.train_steps_per_epoch,
    )  # fmt: skip
    validation = None
    if val_data is not None:
        world = rank_context().world_size
        size = validation_batch_size(val_data.num_rows, world, spec.batch_size, spec.val_batch_size)
        validation = NumpyLoader(
            val_data, size, columns=columns, shuffle=False, max_steps=spec.validation_steps_per_epoch
        )
    if not spec.inmemory_cache_all:
        return train, validation
    kept = None if validation is None else InMemory(validation, False, spec.seed)
    return InMemory(train, spec.shuffle, spec.seed), kept


def validation_batch_size(rows: int, world: int, batch_size: int, asked: int | None = None) -> int:
    """`asked` (`val_batch_size`), at most a rank's share of `rows`; without it, the largest batch up to
    `batch_size` that leaves at most 1% of `rows` (or fewer than `world`) unread."""
    if asked is not None:
        return max(1, min(asked, rows // world))
    allowed = max(world - 1, rows // 100)
    top = max(1, min(batch_size, rows // world))
    return next(b for b in range(top, 0, -1) if rows % (world * b) <= allowed or b == 1)


def _optimizer(optimizer: Any, model: Any) -> Any:
    """The optimizer over `model`'s parameters: the one pickled with it (the same parameters), one made by a
    factory ``optimizer(params)``, or Adam by default."""
    import torch

    if optimizer is None:
        return torch.optim.Adam(model.parameters(), lr=1e-3)
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    return optimizer(model.parameters())


def _device(use_gpu: bool) -> Any:
    """This rank's GPU (of those Spark assigned it) when there is one and `use_gpu`; else the CPU."""
    import torch

    if use_gpu and torch.cuda.is_available():
        return torch.device("cuda", rank_context().local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def _resume(model: Any, optimizer: Any) -> tuple[int, dict[str, list[float]]]:
    """The epoch to start at and the history so far: from the run's latest checkpoint, after a failure."""
    if not os.environ.get(Env.CHECKPOINT_DIR):
        return 0, {}
    state = load_checkpoint(map_location="cpu")
    if state is None:
        return 0, {}
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    log_to_driver(f"resuming from the checkpoint of epoch {state['epoch'] + 1}")
    return state["epoch"] + 1, state["history"]


def _checkpoint(model: Any, optimizer: Any, epoch: int, history: dict[str, list[float]]) -> None:
    if os.environ.get(Env.CHECKPOINT_DIR):
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        save_checkpoint({**state, "history": history}, step=epoch, background=True)
