"""A small real DDP training function used by the local and Spark tests (gloo, CPU)."""

from __future__ import annotations

from typing import Any


def ddp_train(epochs: int = 30) -> dict[str, Any]:
    """Fit a linear model with DistributedDataParallel; every rank returns its weights and losses."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234 + rank)  # different data per rank; DDP must still agree on weights
    x = torch.randn(256, 8)
    y = x @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.5
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(epochs):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    dist.destroy_process_group()
    return {"rank": rank, "world": world, "weights": [g.tolist() for g in gathered], "losses": losses}


def assert_trained_in_lockstep(result: dict[str, Any], world: int) -> None:
    assert result["rank"] == 0 and result["world"] == world
    weights = result["weights"]
    assert len(weights) == world
    for other in weights[1:]:
        assert other == weights[0], "ranks ended with different weights"
    losses = result["losses"]
    assert losses[-1] < losses[0] * 0.5, f"loss did not fall: {losses[0]} -> {losses[-1]}"
