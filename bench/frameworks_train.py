"""The training script `bench/frameworks.py` times under each launcher: one framework (argv[1]: ddp, lightning,
accelerate or hf_trainer) trains a tiny model (an MLP; for the Trainer a 1-layer BERT built from its config) on
generated data for STEPS steps per rank; rank 0 appends its steps/s (after
WARMUP steps) to the file argv[2] as one JSON line. Under sparkrunner it is run with `Runner.run_script`.
``ddp_large`` is ``ddp`` with a wider model and larger batches (steps of tens of ms instead of about 2 ms)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch

STEPS, WARMUP, BATCH, WIDTH = 200, 20, 32, 64


LARGE = {"WIDTH": 1024, "BATCH": 256, "STEPS": 60, "WARMUP": 10}  # ddp_large: steps of tens of ms


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1))


def dataset() -> torch.utils.data.TensorDataset:
    """Enough samples for STEPS batches on every rank (the samplers split them by WORLD_SIZE)."""
    x = torch.randn(
        STEPS * BATCH * int(os.environ["WORLD_SIZE"]), WIDTH, generator=torch.Generator().manual_seed(1)
    )
    return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))


def rate(stamps: list[float]) -> float:
    """Steps per second after the warm-up steps."""
    return (len(stamps) - WARMUP) / (stamps[-1] - stamps[WARMUP - 1])


def ddp() -> float:
    """Plain torch DDP with a DistributedSampler."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    net = torch.nn.parallel.DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    data = dataset()
    loader = torch.utils.data.DataLoader(data, BATCH, sampler=torch.utils.data.DistributedSampler(data))
    stamps = []
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        optimizer.step()
        stamps.append(time.perf_counter())
    dist.destroy_process_group()
    return rate(stamps)


def ddp_large() -> float:
    """`ddp` with the `LARGE` sizes."""
    globals().update(LARGE)
    return ddp()


def lightning() -> float:
    """Lightning DDP: `sparkrunner.lightning.ddp()` under sparkrunner; `strategy="ddp"` with `devices` under torchrun."""
    import tempfile

    import pytorch_lightning as pl

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model()
            self.stamps: list[float] = []

        def training_step(self, batch: Any, _: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def on_train_batch_end(self, *_: Any) -> None:
            self.stamps.append(time.perf_counter())

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    from sparkrunner.common.environment import Env

    if Env.RUN_ID in os.environ:
        import sparkrunner.lightning

        shape: dict[str, Any] = {"strategy": sparkrunner.lightning.ddp()}
    else:
        shape = {"strategy": "ddp", "devices": int(os.environ["LOCAL_WORLD_SIZE"])}
    module = Regression()
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            accelerator="cpu", max_epochs=1, default_root_dir=root, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, **shape,
        )  # fmt: skip
        trainer.fit(module, torch.utils.data.DataLoader(dataset(), BATCH))
    return rate(module.stamps)


def accelerate() -> float:
    """A hand-written loop through `Accelerator.prepare`."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    net, optimizer, loader = accelerator.prepare(
        net, optimizer, torch.utils.data.DataLoader(dataset(), BATCH)
    )
    stamps = []
    for x, y in loader:
        optimizer.zero_grad()
        accelerator.backward(torch.nn.functional.mse_loss(net(x), y))
        optimizer.step()
        stamps.append(time.perf_counter())
    return rate(stamps)


def hf_trainer() -> float:
    """The Hugging Face Trainer on a 1-layer BERT classifier built from its config (nothing downloaded)."""
    import tempfile

    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    class Stamps(TrainerCallback):
        def __init__(self) -> None:
            self.stamps: list[float] = []

        def on_step_end(self, *_: Any, **__: Any) -> None:
            self.stamps.append(time.perf_counter())

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=32, hidden_size=WIDTH, num_hidden_layers=1, num_attention_heads=2, intermediate_size=WIDTH
    )
    ids = torch.arange(STEPS * BATCH * int(os.environ["WORLD_SIZE"]) * 6).reshape(-1, 6) % 32
    data = [{"input_ids": row, "labels": int(row.sum()) % 2} for row in ids]
    stamps = Stamps()
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=BATCH, num_train_epochs=1, use_cpu=True, report_to=[],
            save_strategy="no", logging_strategy="no", disable_tqdm=True,
        )  # fmt: skip
        Trainer(
            model=BertForSequenceClassification(config), args=args, train_dataset=data, callbacks=[stamps]
        ).train()
    return rate(stamps.stamps)


if __name__ == "__main__":
    frameworks = {
        "ddp": ddp,
        "ddp_large": ddp_large,
        "lightning": lightning,
        "accelerate": accelerate,
        "hf_trainer": hf_trainer,
    }
    steps_per_s = frameworks[sys.argv[1]]()
    if int(os.environ["RANK"]) == 0:
        with open(sys.argv[2], "a") as out:
            out.write(json.dumps({"framework": sys.argv[1], "steps_per_s": steps_per_s}) + "\n")
