"""Training functions run by the Horovod tests (pickled by value: executors cannot import this folder)."""

from __future__ import annotations

import os
from typing import Any


def classic_train(checkpoint_dir: str, epochs: int = 2) -> dict[str, Any]:
    """The classic HorovodRunner PyTorch recipe, unchanged from what users run on Databricks."""
    import horovod.torch as hvd
    import torch
    import torch.nn.functional as F

    hvd.init()
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
    torch.manual_seed(hvd.rank())  # different initial weights per rank: the broadcast must fix that
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    initial = torch.cat([p.detach().flatten() for p in model.parameters()])
    data = torch.Generator().manual_seed(100 + hvd.rank())  # each rank its own shard
    x = torch.randn(64, 4, generator=data)
    y = x.sum(1, keepdim=True)
    for epoch in range(epochs):
        for i in range(0, 64, 16):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x[i : i + 16]), y[i : i + 16])
            loss.backward()
            optimizer.step()
        avg_loss = hvd.allreduce(loss.detach(), name="avg_loss")
        if hvd.rank() == 0:
            torch.save(model.state_dict(), os.path.join(checkpoint_dir, f"rank{hvd.rank()}-epoch{epoch}.pt"))
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return {
        "size": hvd.size(),
        "weights": hvd.allgather(weights.unsqueeze(0)).tolist(),
        "initial": initial.tolist(),
        "avg_loss": float(avg_loss),
        "controller": "mpi" if hvd.mpi_enabled() else "gloo",
    }


def sum_ranks() -> dict[str, Any]:
    """An allreduce of rank+1, and every rank's pid, host address set and starter (for placement checks)."""
    import socket

    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
    me = {
        "rank": hvd.rank(),
        "pid": os.getpid(),
        "hostname": socket.gethostname(),
        "addresses": sorted(_ipv4_addresses()),
        "started_by_task": os.environ.get("SPARKRUNNER_STARTED_BY_TASK"),
        "run_id": os.environ["SPARKRUNNER_RUN_ID"],
    }
    return {"total": total, "size": hvd.size(), "ranks": hvd.allgather_object(me)}


def _ipv4_addresses() -> set[str]:
    import psutil

    return {a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == 2}


def fail_on_rank_one() -> None:
    """Rank 1 raises after a first allreduce while the other ranks wait in a second one."""
    import horovod.torch as hvd
    import torch

    hvd.init()
    hvd.allreduce(torch.ones(1), name="first")
    if hvd.rank() == 1:
        raise ValueError(f"rank one gives up (run {os.environ['SPARKRUNNER_RUN_ID']})")
    hvd.allreduce(torch.ones(1), name="never-completes")


def controller() -> dict[str, Any]:
    """The controller Horovod runs on (MPI only when mpirun started the ranks) and the world size."""
    import horovod.torch as hvd

    hvd.init()
    return {"controller": "mpi" if hvd.mpi_enabled() else "gloo", "size": hvd.size()}
