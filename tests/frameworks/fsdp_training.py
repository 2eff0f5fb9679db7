"""A deterministic FSDP2 (`fully_shard`) fit that saves a sharded torch.distributed.checkpoint every epoch."""

from __future__ import annotations

from typing import Any

from tests.recovery.training import EPOCHS, fit_epoch


def fsdp_checkpointed(failure: str | None = None, marker: str = "") -> dict[str, Any]:
    """Fit a 2-layer MLP sharded with `fully_shard`, saving model and optimizer shards with DCP after every
    epoch into the run's checkpoint folder, and resuming from the newest complete one. `failure` acts in epoch 3
    of attempt 0 as in `tests.recovery.training.ddp_checkpointed`. Rank 0 returns the full final weights, the
    (attempt, epoch) pairs run since the first epoch, and the step it resumed from."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_state_dict,
        set_state_dict,
    )
    from torch.distributed.fsdp import fully_shard

    import sparkrunner

    ctx = sparkrunner.rank_context()
    dist.init_process_group("gloo")
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    generator = torch.Generator().manual_seed(100 + ctx.rank)
    x = torch.randn(64, 8, generator=generator)
    y = x @ torch.arange(1.0, 9.0).unsqueeze(1)
    history = torch.zeros(EPOCHS, dtype=torch.int64) - 1  # attempt that ran each epoch; -1: not yet
    start, latest = 0, sparkrunner.latest_sharded_checkpoint()
    if latest is not None:
        model_state, optim_state = get_state_dict(model, opt)
        state = {"model": model_state, "optim": optim_state, "history": history}
        dcp.load(state, checkpoint_id=latest.path)
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        history, start = state["history"], latest.step
    for epoch in range(start, EPOCHS):
        fit_epoch(epoch, model, opt, (x, y), failure, marker, None)
        history[epoch] = ctx.attempt
        model_state, optim_state = get_state_dict(model, opt)
        state = {"model": model_state, "optim": optim_state, "history": history}
        dcp.save(state, checkpoint_id=sparkrunner.sharded_checkpoint(epoch + 1))
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    dist.destroy_process_group()  # rank 0 holds the full state; the others an empty one
    weights = [value for name in sorted(full) for value in full[name].flatten().tolist()]
    ran = [(int(attempt), epoch) for epoch, attempt in enumerate(history.tolist())]
    return {"weights": weights, "history": ran, "resumed_from": latest and latest.step}
