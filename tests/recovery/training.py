"""Training functions for the recovery tests: a deterministic torch DDP fit that checkpoints every epoch."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from tests.waiting import poll_until

EPOCHS = 6
FAILING_EPOCH = 3


def ddp_checkpointed(failure: str | None = None, marker: str = "") -> dict[str, Any]:
    """Fit a linear model with DDP (momentum SGD), saving a checkpoint at the end of every epoch.

    `failure` acts in epoch 3 of attempt 0 only: ``"exit"``: rank 1 calls ``os._exit``; ``"sigkill"``: rank 1
    SIGKILLs itself; ``"wait_for_kill"``:
    rank 1 touches `marker` and both ranks wait there until they are stopped (the test kills or decommissions
    an executor meanwhile); ``"save_on_stop"``: the same, and rank 0 saves a checkpoint marked
    ``saved_on_stop`` when it is stopped. Rank 0 returns its final weights, which (attempt, epoch) pairs ran,
    from the checkpointed history on, and whether it resumed from a checkpoint saved on stop.
    """
    import torch
    import torch.distributed as dist

    import sparkrunner

    ctx = sparkrunner.rank_context()
    dist.init_process_group("gloo")
    torch.manual_seed(7)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    generator = torch.Generator().manual_seed(100 + ctx.rank)
    x = torch.randn(64, 8, generator=generator)
    y = x @ torch.arange(1.0, 9.0).unsqueeze(1)
    state = sparkrunner.load_checkpoint()
    history: list[tuple[int, int]] = []
    start = 0
    resumed_from_stop = bool(state and state.get("saved_on_stop"))
    if state is not None:
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        history, start = state["history"], state["next_epoch"]
    print(f"attempt {ctx.attempt} starts at epoch {start}", flush=True)
    for epoch in range(start, EPOCHS):
        fit_epoch(epoch, model, opt, (x, y), failure, marker, state)
        history = [*history, (ctx.attempt, epoch)]
        state = {
            "model": model.module.state_dict(),
            "optimizer": opt.state_dict(),
            "history": history,
            "next_epoch": epoch + 1,
        }
        sparkrunner.save_checkpoint(state, step=epoch + 1)
        dist.barrier()  # no rank starts the next epoch before this epoch's checkpoint is complete
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    dist.destroy_process_group()
    return {"weights": weights, "history": history, "resumed_from_stop": resumed_from_stop}


def fit_epoch(
    epoch: int, model: Any, opt: Any, data: tuple[Any, Any], failure: str | None, marker: str, state: Any
) -> None:
    """Four full-batch SGD steps of mean squared error; first, in epoch 3 of attempt 0, `failure` (see above)."""
    import torch

    import sparkrunner

    ctx = sparkrunner.rank_context()
    if ctx.attempt == 0 and epoch == FAILING_EPOCH and failure is not None:
        _fail(failure, ctx.rank, marker, state)
    x, y = data
    for _ in range(4):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _fail(failure: str, rank: int, marker: str, state: Any) -> None:
    import sparkrunner

    if failure == "exit" and rank == 1:
        os._exit(7)
    if failure == "sigkill" and rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if failure in ("wait_for_kill", "save_on_stop"):
        if rank == 1:
            Path(marker).touch()
        poll_until(sparkrunner.stopping, 180)
        if failure == "save_on_stop" and sparkrunner.stopping():
            sparkrunner.save_checkpoint({**state, "saved_on_stop": True}, step=FAILING_EPOCH)
        raise RuntimeError("stopped while waiting for the executor kill")
