"""pyspark's TorchDistributor docstring examples (pyspark/ml/torch/distributor.py, as installed), as far as they
run on a CPU, through the drop-in with the import changed: their `# ...` filled with a tiny model, `nccl` and
`accelerator="gpu"` made `gloo` and `"cpu"`, `use_gpu=False`. Run as a program on `local[2]`
(tests/compat/test_upstream_examples.py, opt-in); prints one ``EXAMPLE <name>: ok ...`` line per example that ran.
The DeepspeedTorchDistributor examples ask for 4 GPUs per node: not run."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from pyspark.sql import SparkSession

from sparkrunner.compat import (
    TorchDistributor,
)  # was: from pyspark.ml.torch.distributor import TorchDistributor

TRAIN_SCRIPT = """
import argparse

import torch
import torch.distributed

parser = argparse.ArgumentParser()
parser.add_argument("--learning-rate", type=float)
args = parser.parse_args()
torch.distributed.init_process_group(backend="gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate)
for _ in range(5):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
print("trained rank", torch.distributed.get_rank(), "lr", args.learning_rate)
torch.distributed.destroy_process_group()
"""


def train(learning_rate: float) -> Any:
    """The first example's function (its `backend="nccl"` on CPU: gloo)."""
    import torch
    import torch.distributed

    torch.distributed.init_process_group(backend="gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    for _ in range(5):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
    torch.distributed.destroy_process_group()  # the docstring's `torch.destroy_process_group()` does not exist
    return model.module  # or anything else


def lightning_train(num_proc: int, devices: int, num_nodes: int) -> Any:
    """The Lightning example's function: ``Trainer(devices=..., num_nodes=..., strategy="ddp")``, on CPU."""
    import torch

    try:
        from pytorch_lightning import LightningModule, Trainer
    except ImportError:  # the `lightning` package's name for the same Trainer
        from lightning.pytorch import LightningModule, Trainer

    class Regression(LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, _: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x = torch.randn(64, 4)
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8
    )
    trainer = Trainer(
        accelerator="cpu", devices=devices, num_nodes=num_nodes, strategy="ddp", max_epochs=1,
        enable_progress_bar=False, enable_checkpointing=False, logger=False,
    )  # fmt: skip
    trainer.fit(Regression(), data)
    return trainer.global_step, trainer.world_size, trainer.node_rank


def main() -> None:
    SparkSession.builder.master("local[2]").config("spark.ui.showConsoleProgress", "false").getOrCreate()
    model = TorchDistributor(num_processes=2, local_mode=True, use_gpu=False).run(train, 1e-3)
    print(f"EXAMPLE function local_mode=True: ok {type(model).__name__}", flush=True)

    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "train.py")
        with open(script, "w", encoding="utf-8") as file:
            file.write(TRAIN_SCRIPT)
        TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(script, "--learning-rate=1e-3")
    print("EXAMPLE script local_mode=False: ok", flush=True)

    num_proc = (
        2  # devices=1, num_nodes=num_processes for multi node; devices=num_processes, num_nodes=1 on one
    )
    for local_mode, devices, num_nodes in ((False, 1, num_proc), (True, num_proc, 1)):
        distributor = TorchDistributor(num_processes=num_proc, local_mode=local_mode, use_gpu=False)
        steps, world, node = distributor.run(lightning_train, num_proc, devices, num_nodes)
        name = f"Lightning devices={devices} num_nodes={num_nodes} local_mode={local_mode}"
        print(f"EXAMPLE {name}: ok global_step={steps} world_size={world} node_rank={node}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
